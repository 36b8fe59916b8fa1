package coord

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Cause names what a Redis failure was, in a word an operator can act on.
// It is in the log lines of a loss ("cause") and in [Coordinator.Cause].
type Cause string

// The causes of a failure. The first five are Redis's answers: it is up
// and refuses; the others say it was not reached.
const (
	CauseAuth     Cause = "auth"     // the credentials were refused (WRONGPASS, NOAUTH)
	CauseNoPerm   Cause = "noperm"   // the user may not run a command or touch a key (ACL NOPERM)
	CauseDatabase Cause = "database" // the database number does not exist
	CauseReadOnly Cause = "readonly" // a replica: it takes no writes (READONLY)
	CauseFull     Cause = "full"     // full under maxmemory with noeviction (OOM)
	CauseRefused  Cause = "refused"  // connection refused: nothing listens at the address
	CauseTimeout  Cause = "timeout"  // no answer within the timeout
	CauseTLS      Cause = "tls"      // the TLS handshake failed (certificate, or a server without TLS)
	CauseDNS      Cause = "dns"      // the host name did not resolve
	CauseOther    Cause = "other"    // anything else (a connection reset, an unexpected answer)
)

// Classify returns the cause of a Redis failure err (CauseOther for one
// it does not know; empty for nil).
func Classify(err error) Cause {
	if err == nil {
		return ""
	}
	for _, a := range answers {
		if redis.HasErrorPrefix(err, a.prefix) {
			return a.cause
		}
	}
	var dnsErr *net.DNSError
	var recordErr tls.RecordHeaderError
	var verifyErr *tls.CertificateVerificationError
	var alert tls.AlertError
	var unknownAuthority x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.As(err, &dnsErr):
		return CauseDNS
	case errors.As(err, &recordErr), errors.As(err, &verifyErr), errors.As(err, &alert),
		errors.As(err, &unknownAuthority), errors.As(err, &hostErr), errors.As(err, &certErr),
		strings.Contains(err.Error(), "tls: "):
		return CauseTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return CauseRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return CauseTimeout
	}
	return CauseOther
}

// answers are the starts of Redis's error answers (less "ERR "), by cause.
var answers = []struct {
	prefix string
	cause  Cause
}{
	{"WRONGPASS", CauseAuth},
	{"NOAUTH", CauseAuth},
	{"invalid password", CauseAuth}, // Redis before 6
	{"AUTH ", CauseAuth},            // a password sent to a Redis that has none
	{"Client sent AUTH", CauseAuth}, // the same, Redis before 6
	{"NOPERM", CauseNoPerm},
	{"DB index is out of range", CauseDatabase},
	{"invalid DB index", CauseDatabase},
	{"SELECT is not allowed", CauseDatabase}, // a database number on a cluster
	{"READONLY", CauseReadOnly},
	{"OOM", CauseFull},
}

// describe says what a failure of cause c at start means, after "redis
// at host:port".
func describe(c Cause) string {
	switch c {
	case CauseAuth:
		return "refused the credentials (the URL's user and password)"
	case CauseDatabase:
		return "has no database of the URL's number"
	}
	return "failed (" + string(c) + ")"
}

// answered reports whether a failure of cause c is an answer of a Redis
// that is up and refuses.
func answered(c Cause) bool {
	switch c {
	case CauseAuth, CauseNoPerm, CauseDatabase, CauseReadOnly, CauseFull:
		return true
	}
	return false
}

// refusedForGood reports whether a failure of cause c at start is one
// that waiting cannot end: Redis refused what the URL says (credentials,
// database), which only a new configuration changes.
func refusedForGood(c Cause) bool { return c == CauseAuth || c == CauseDatabase }

// StartError is returned by New when Redis answers and refuses what the
// URL says: the credentials or the database number.
type StartError struct {
	Addr  string
	Cause Cause
	Err   error // Redis's answer
}

func (e *StartError) Error() string {
	return fmt.Sprintf("redis at %s %s: %v", e.Addr, describe(e.Cause), e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }
