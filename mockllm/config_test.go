package mockllm_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmgovernor/governor/mockllm"
)

func TestConfigValidate(t *testing.T) {
	assert.NoError(t, mockllm.Config{}.Validate())
	assert.NoError(t, mockllm.Config{Faults: mockllm.Faults{Error500: 0.5, Hang: 0.5}}.Validate())
	for _, cfg := range []mockllm.Config{
		{Latency: -1},
		{LatencySpread: -0.1},
		{ChunkDelay: -1},
		{StreamChunks: -1},
		{StreamChunks: 1_000_000},
		{MaxConcurrency: -1},
		{Rate: -1},
		{Burst: -1},
		{Schedule: []mockllm.Phase{{At: -time.Second}}},
		{Schedule: []mockllm.Phase{{At: time.Second, Rate: -2}}},
		{Faults: mockllm.Faults{Error500: 1.5}},
		{Faults: mockllm.Faults{Reset: -0.1}},
		{Faults: mockllm.Faults{Error500: 0.6, Overloaded529: 0.6}},
		{Faults: mockllm.Faults{OverloadedMidStream: 1.1}},
		{Faults: mockllm.Faults{Hang: 0.5, OverloadedMidStream: 0.6}},
	} {
		assert.Error(t, cfg.Validate(), "%+v", cfg)
	}
	assert.Panics(t, func() { mockllm.New(mockllm.Config{Rate: -1}) })
}

func TestParseSchedule(t *testing.T) {
	base := mockllm.Limits{MaxConcurrency: 4, Rate: 10, Burst: 5}
	phases, err := mockllm.ParseSchedule(" 20s:cap=8 , 40s:rate=2.5:burst=0, 1m:max-concurrency=0", base)
	require.NoError(t, err)
	assert.Equal(t, []mockllm.Phase{
		{At: 20 * time.Second, MaxConcurrency: 8, Rate: 10, Burst: 5},
		{At: 40 * time.Second, MaxConcurrency: 8, Rate: 2.5, Burst: 0},
		{At: time.Minute, MaxConcurrency: 0, Rate: 2.5, Burst: 0},
	}, phases)

	phases, err = mockllm.ParseSchedule("", base)
	assert.NoError(t, err)
	assert.Nil(t, phases)

	for _, bad := range []string{
		"20s",
		"20:cap=8",
		"-1s:cap=8",
		"20s:cap",
		"20s:cap=-1",
		"20s:cap=1.5",
		"20s:rate=x",
		"20s:rate=-1",
		"20s:speed=3",
		"20s:cap=1,10s:cap=2",
		"20s:cap=1,20s:cap=2",
		"20s:cap=1,",
	} {
		_, err := mockllm.ParseSchedule(bad, base)
		assert.Error(t, err, bad)
	}
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"20s:cap=8,40s:cap=32", "1m:rate=5:burst=2", "0s:cap=0", ":", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		phases, err := mockllm.ParseSchedule(s, mockllm.Limits{})
		if err != nil {
			return
		}
		// What parses is a valid schedule.
		require.NoError(t, mockllm.Config{Schedule: phases}.Validate(), "%q", s)
		for i := 1; i < len(phases); i++ {
			require.Greater(t, phases[i].At, phases[i-1].At, "%q", s)
		}
	})
}
