package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An upstream that is Governor's own main listener sends every call back
// to Governor as a new call, each holding a slot of its lane, until the
// attempt timeout (10 minutes by default), which then reads as a slow
// provider. Such a configuration is refused at start-up, naming the
// variable.
func TestUpstreamThatIsGovernorItselfIsRefused(t *testing.T) {
	for _, tc := range []struct{ listen, name, value string }{
		{"127.0.0.1:8080", "GOVERNOR_UPSTREAM", "http://127.0.0.1:8080"},
		{"127.0.0.1:8080", "GOVERNOR_UPSTREAM", "http://localhost:8080/v1"},
		{"0.0.0.0:8080", "GOVERNOR_UPSTREAM", "http://127.0.0.2:8080"},
		{":443", "GOVERNOR_UPSTREAM", "https://localhost"},
		{"[::1]:8080", "GOVERNOR_UPSTREAM", "http://[::1]:8080"},
		{"10.1.2.3:8080", "GOVERNOR_UPSTREAM", "http://10.1.2.3:8080"},
		{"127.0.0.1:8080", "GOVERNOR_ROUTES", "anthropic=http://127.0.0.1:8080/anthropic"},
		{"127.0.0.1:8080", "GOVERNOR_UPSTREAM", "http://0.0.0.0:8080"}, // dials loopback
		{"localhost:8080", "GOVERNOR_UPSTREAM", "http://127.0.0.1:8080"},
		{"localhost:8080", "GOVERNOR_UPSTREAM", "http://[::1]:8080"},
		{"LocalHost:8080", "GOVERNOR_UPSTREAM", "http://localhost:8080"},
		{"[::1]:8080", "GOVERNOR_UPSTREAM", "http://localhost:8080"},
		{"[::1]:8080", "GOVERNOR_UPSTREAM", "http://[0:0::1]:8080"}, // the same address, written otherwise
		{"0.0.0.0:8080", "GOVERNOR_UPSTREAM", "http://localhost:8080"},
		{"0.0.0.0:8080", "GOVERNOR_UPSTREAM", "http://0.0.0.0:8080"},
		{"[::]:8080", "GOVERNOR_UPSTREAM", "http://[::1]:8080"},
		{":8080", "GOVERNOR_UPSTREAM", "http://127.0.0.1:8080"},
		{"0.0.0.0:80", "GOVERNOR_UPSTREAM", "http://127.0.0.1"},
	} {
		_, err := loadConfig([]string{"GOVERNOR_LISTEN=" + tc.listen, tc.name + "=" + tc.value})
		var ce *configError
		require.True(t, errors.As(err, &ce), "%s=%s with GOVERNOR_LISTEN=%s: %v", tc.name, tc.value, tc.listen, err)
		assert.Equal(t, tc.name, ce.variable)
		assert.Contains(t, err.Error(), "Governor's own listener")
	}
	for _, tc := range []struct{ listen, upstream string }{
		{"127.0.0.1:8080", "http://127.0.0.1:8081"},       // another port: a mock, vLLM
		{"127.0.0.1:8080", "http://governor-shared:8080"}, // another Governor
		{"10.1.2.3:8080", "http://127.0.0.1:8080"},        // loopback is not this listener
		{"127.0.0.1:0", "http://127.0.0.1:8080"},          // a port of its choosing
		{"127.0.0.1:8080", "https://api.openai.com"},
		{"127.0.0.1:8080", "http://127.0.0.2:8080"}, // another loopback address: another socket
		{"127.0.0.2:8080", "http://127.0.0.1:8080"}, // the same, the other way
		{"127.0.0.2:8080", "http://localhost:8080"}, // localhost is 127.0.0.1 (or ::1)
		{"127.0.0.2:8080", "http://0.0.0.0:8080"},   // 0.0.0.0 dials 127.0.0.1
		{"[::1]:8080", "http://127.0.0.1:8080"},     // another family
		{"127.0.0.1:8080", "http://[::1]:8080"},     // the same, the other way
		{"10.1.2.3:8080", "http://localhost:8080"},  // loopback is not this listener
		{"0.0.0.0:8080", "http://10.1.2.4:8080"},    // another machine, as far as Governor knows
		{"localhost:8080", "http://127.0.0.2:8080"}, // localhost is 127.0.0.1 (or ::1)
	} {
		_, err := loadConfig([]string{"GOVERNOR_LISTEN=" + tc.listen, "GOVERNOR_UPSTREAM=" + tc.upstream})
		assert.NoError(t, err, "GOVERNOR_UPSTREAM=%s with GOVERNOR_LISTEN=%s", tc.upstream, tc.listen)
	}
}
