package backup

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// ManifestVersion is the version of the manifest format and of the location
// layout described in the package comment. It must not change without a
// reader for the old version.
const ManifestVersion = 1

// manifestDomain is prepended to the manifest bytes before they are MACed,
// so a signing key shared with another use cannot be made to sign a
// manifest. Must not change without a ManifestVersion bump.
const manifestDomain = "ankusa-backup-manifest-v1\x00"

// sigScheme prefixes the hex signature in the envelope.
const sigScheme = "hmac-sha256:"

// minKeyLen is the shortest signing key accepted.
const minKeyLen = 16

var (
	// ErrBadSignature: a manifest whose signature does not verify with the
	// given key (tampered, or signed with another key).
	ErrBadSignature = errors.New("backup: manifest signature does not verify")
	// ErrCorrupt: a manifest, LATEST or location entry that cannot be
	// parsed or breaks the format's rules.
	ErrCorrupt = errors.New("backup: corrupt backup location")
)

// Manifest describes one backup. Its JSON encoding is the signed format:
// field names must not change without a ManifestVersion bump.
type Manifest struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`         // ULID
	CreatedAt time.Time `json:"created_at"` // UTC
	StoreID   string    `json:"store_id"`   // m:store_id of the checkpointed store
	// WriterNonce identifies the process that wrote the backup; a LATEST
	// from another nonce tells a writer that someone else shares its prefix.
	WriterNonce string `json:"writer_nonce"`
	// IntakeOffset is the store's m:intake_offset read before the
	// checkpoint was taken (so at most the checkpoint's own value), -1 if
	// none: replay from IntakeOffset+1 never skips a record.
	IntakeOffset int64  `json:"intake_offset"`
	Files        []File `json:"files"` // sorted by Name
}

// File is one checkpoint file.
type File struct {
	Name   string `json:"name"`   // relative, "/"-separated
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // lower-case hex
	// Shared files are stored once under shared/<sha256>; the others under
	// backups/<id>/files/<name>.
	Shared bool `json:"shared"`
}

// Bytes is the total size of the backup's files.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// envelope is the stored form of a manifest: the manifest's exact bytes and
// their signature.
type envelope struct {
	Signature string          `json:"signature"`
	Manifest  json.RawMessage `json:"manifest"`
}

func sign(key, raw []byte) string { return Sign(manifestDomain, key, raw) }

// Sign is the signature every signed object of a backup location carries
// (manifests here, archive segments and their catalogue in
// internal/archive): "hmac-sha256:<hex>" of domain then raw. domain keeps
// one key from being made to sign one kind of object for another.
func Sign(domain string, key, raw []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(domain))
	mac.Write(raw)
	return sigScheme + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature checks sig against Sign(domain, key, raw) in constant time; a
// mismatch or a malformed sig is an error wrapping ErrBadSignature.
func VerifySignature(domain string, key, raw []byte, sig string) error {
	got, ok := strings.CutPrefix(sig, sigScheme)
	gotMAC, err := hex.DecodeString(got)
	if !ok || err != nil {
		return fmt.Errorf("%w: signature %q is not %s<hex>", ErrBadSignature, sig, sigScheme)
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(Sign(domain, key, raw), sigScheme))
	if !hmac.Equal(gotMAC, want) {
		return ErrBadSignature
	}
	return nil
}

// encodeManifest returns the signed envelope of m.
func encodeManifest(m Manifest, key []byte) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	env, err := json.Marshal(envelope{Signature: sign(key, raw), Manifest: raw})
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	// The signature covers the bytes a reader will find; check that
	// re-encoding inside the envelope left them alone.
	if _, err := decodeManifest(env, key); err != nil {
		return nil, fmt.Errorf("encode manifest: does not read back: %w", err)
	}
	return env, nil
}

// decodeManifest verifies env's signature with key, then decodes and
// validates the manifest. A nil key skips the signature (List only).
//
// Invariants (fuzzed): it never panics; a manifest it returns without error
// passed validate; with a key, every byte of the manifest was covered by a
// signature that verified.
func decodeManifest(env, key []byte) (Manifest, error) {
	var e envelope
	if err := json.Unmarshal(env, &e); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest envelope: %v", ErrCorrupt, err)
	}
	if key != nil {
		if err := VerifySignature(manifestDomain, key, e.Manifest, e.Signature); err != nil {
			return Manifest{}, err
		}
	}
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(e.Manifest, &v); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if v.Version != ManifestVersion {
		return Manifest{}, fmt.Errorf("%w: manifest version %d, this build reads %d", ErrCorrupt, v.Version, ManifestVersion)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(e.Manifest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// validate checks the rules every stored manifest keeps.
func (m Manifest) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest %s: %s", ErrCorrupt, m.ID, fmt.Sprintf(format, args...))
	}
	if m.Version != ManifestVersion {
		return bad("version %d", m.Version)
	}
	if _, err := ulid.ParseStrict(m.ID); err != nil {
		return bad("id is not a ULID: %v", err)
	}
	if m.StoreID == "" {
		return bad("no store_id")
	}
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if err := validName(f.Name); err != nil {
			return bad("%v", err)
		}
		if seen[f.Name] {
			return bad("file %q listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 {
			return bad("file %q has size %d", f.Name, f.Size)
		}
		if !validSHA(f.SHA256) {
			return bad("file %q has sha256 %q", f.Name, f.SHA256)
		}
	}
	return nil
}

// validName checks a checkpoint file name from a manifest: it becomes both a
// key segment and a local path on restore, so nothing may escape.
func validName(name string) error {
	if err := validKey(name); err != nil {
		return fmt.Errorf("file name: %w", err)
	}
	if path.Clean(name) != name {
		return fmt.Errorf("file name %q is not clean", name)
	}
	if name == MarkerName {
		return fmt.Errorf("file name %q is reserved for the restore marker", name)
	}
	return nil
}

func validSHA(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
