package kafkaclient

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The file errors (ca_file, the client certificate) are covered through the
// adapters' constructors; this checks what AuthOpts adds: one option per
// setting in use, and errors named after the client.
func TestAuthOpts(t *testing.T) {
	scram := &SASL{Mechanism: "scram-sha-256", Username: "u", Password: "p"}
	for _, tc := range []struct {
		name  string
		sasl  *SASL
		tls   *TLS
		opts  int
		error string // "" = accepted
	}{
		{"none", nil, nil, 0, ""},
		{"tls off ignores its files", nil, &TLS{CAFile: "/nonexistent/ca.pem"}, 0, ""},
		{"sasl", scram, nil, 1, ""},
		{"sasl and tls", scram, &TLS{Enabled: true}, 2, ""},
		{"sasl mechanism", &SASL{Mechanism: "gssapi"}, nil, 0, `kafka test: sasl mechanism "gssapi"`},
		{"key without cert", nil, &TLS{Enabled: true, KeyFile: "k.pem"}, 0, "kafka test tls: cert_file and key_file go together"},
	} {
		opts, err := AuthOpts("kafka test", tc.sasl, tc.tls)
		switch {
		case tc.error == "" && (err != nil || len(opts) != tc.opts):
			t.Errorf("%s: AuthOpts = %d options, %v; want %d, nil", tc.name, len(opts), err, tc.opts)
		case tc.error != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.error)):
			t.Errorf("%s: AuthOpts err = %v, want it to start %q", tc.name, err, tc.error)
		}
	}
}

func TestLogger(t *testing.T) {
	for _, debug := range []bool{false, true} {
		level, want := slog.LevelInfo, kgo.LogLevelWarn
		if debug {
			level, want = slog.LevelDebug, kgo.LogLevelInfo
		}
		var buf bytes.Buffer
		l := Logger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})))
		if got := l.Level(); got != want {
			t.Errorf("debug %v: Level() = %v, want %v", debug, got, want)
		}
		l.Log(kgo.LogLevelError, "e", "k", 1)
		l.Log(kgo.LogLevelWarn, "w")
		l.Log(kgo.LogLevelInfo, "i")
		out := buf.String()
		if !strings.Contains(out, "level=ERROR msg=e k=1") || !strings.Contains(out, "level=WARN msg=w") {
			t.Errorf("debug %v: errors and warnings lost their level: %s", debug, out)
		}
		if got := strings.Contains(out, "level=DEBUG msg=i"); got != debug {
			t.Errorf("debug %v: info line logged at debug = %v: %s", debug, got, out)
		}
	}
}
