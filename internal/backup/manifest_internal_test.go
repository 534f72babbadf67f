package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

var fuzzKey = []byte("fuzz-signing-key-0123456789")

func sampleManifest() Manifest {
	return Manifest{
		Version:      ManifestVersion,
		ID:           ulid.MustNew(ulid.Timestamp(time.Unix(1700000000, 0)), bytes.NewReader(make([]byte, 16))).String(),
		CreatedAt:    time.Unix(1700000000, 123).UTC(),
		StoreID:      "store-<&>-id",
		WriterNonce:  "nonce",
		IntakeOffset: 7,
		Files: []File{
			{Name: "000001.sst", Size: 3, SHA256: strings.Repeat("ab", 32), Shared: true},
			{Name: "MANIFEST-000002", Size: 0, SHA256: strings.Repeat("0", 64)},
		},
	}
}

func TestManifest_RoundTrip(t *testing.T) {
	m := sampleManifest()
	env, err := encodeManifest(m, fuzzKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeManifest(env, fuzzKey)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(m)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip:\n%s\n%s", a, b)
	}
	if _, err := decodeManifest(env, []byte("another key of enough length")); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("other key: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Manifest)
	}{
		{"bad id", func(m *Manifest) { m.ID = "x" }},
		{"no store id", func(m *Manifest) { m.StoreID = "" }},
		{"escaping name", func(m *Manifest) { m.Files[0].Name = "../../etc/passwd" }},
		{"absolute name", func(m *Manifest) { m.Files[0].Name = "/etc/passwd" }},
		{"marker name", func(m *Manifest) { m.Files[0].Name = MarkerName }},
		{"duplicate", func(m *Manifest) { m.Files[1].Name = m.Files[0].Name }},
		{"bad sha", func(m *Manifest) { m.Files[0].SHA256 = strings.Repeat("AB", 32) }},
		{"negative size", func(m *Manifest) { m.Files[0].Size = -1 }},
		{"version", func(m *Manifest) { m.Version = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sampleManifest()
			tc.mod(&m)
			if _, err := encodeManifest(m, fuzzKey); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("encode = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzDecodeManifest checks decodeManifest's invariants on arbitrary input:
// it never panics; whatever it accepts passed validate (no file name can
// escape a directory); and with a key, it accepts only bytes whose
// signature verifies.
func FuzzDecodeManifest(f *testing.F) {
	env, err := encodeManifest(sampleManifest(), fuzzKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(env)
	f.Add([]byte(`{"signature":"hmac-sha256:00","manifest":{"version":1}}`))
	f.Add([]byte(`{}`))
	f.Add(bytes.Replace(env, []byte(`"intake_offset":7`), []byte(`"intake_offset":8`), 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b, fuzzKey)
		if err != nil {
			return
		}
		if err := m.validate(); err != nil {
			t.Fatalf("accepted an invalid manifest: %v", err)
		}
		var e envelope
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("accepted an unparsable envelope: %v", err)
		}
		if !strings.EqualFold(e.Signature, sign(fuzzKey, e.Manifest)) {
			t.Fatalf("accepted signature %q over %q", e.Signature, e.Manifest)
		}
		if _, err := decodeManifest(b, nil); err != nil {
			t.Fatalf("unsigned decode rejects what signed decode accepted: %v", err)
		}
	})
}
