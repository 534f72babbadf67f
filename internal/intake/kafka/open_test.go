package kafka_test

import (
	"strings"
	"testing"

	"github.com/ankusa/ankusa/internal/intake/kafka"
	"github.com/ankusa/ankusa/internal/kafkaclient"
)

// TestOpen_Options: Open refuses options it cannot use and does not dial
// (unreachable brokers open fine).
func TestOpen_Options(t *testing.T) {
	good := kafka.Options{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Node: "n", Partition: -1}
	for _, tc := range []struct {
		name string
		edit func(*kafka.Options)
		want string // "" = opens
	}{
		{"good, unreachable broker", func(*kafka.Options) {}, ""},
		{"largest record cap", func(o *kafka.Options) { o.MaxRecordBytes = 1 << 30 }, ""},
		{"smallest record cap", func(o *kafka.Options) { o.MaxRecordBytes = 1 }, ""},
		{"sasl scram", func(o *kafka.Options) {
			o.SASL = &kafkaclient.SASL{Mechanism: "scram-sha-512", Username: "u", Password: "p"}
		}, ""},
		{"no brokers", func(o *kafka.Options) { o.Brokers = nil }, "no brokers"},
		{"no topic", func(o *kafka.Options) { o.Topic = "" }, "no topic"},
		{"no node", func(o *kafka.Options) { o.Node = "" }, "no node"},
		{"partition -2", func(o *kafka.Options) { o.Partition = -2 }, "partition -2"},
		{"record cap too large", func(o *kafka.Options) { o.MaxRecordBytes = 1<<30 + 1 }, "max record bytes"},
		{"negative backup age", func(o *kafka.Options) { o.BackupMaxAge = -1 }, "backup max age"},
		{"unknown sasl", func(o *kafka.Options) { o.SASL = &kafkaclient.SASL{Mechanism: "gssapi"} }, "gssapi"},
		{"tls half a key pair", func(o *kafka.Options) { o.TLS = &kafkaclient.TLS{Enabled: true, CertFile: "c.pem"} }, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			in, err := kafka.Open(o)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if err := in.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				_ = in.Close()
				t.Fatalf("Open accepted %+v", o)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
