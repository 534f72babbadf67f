package backup

import (
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Key layout of a location; see the package comment. Must not change
// without a ManifestVersion bump.
const (
	latestName   = "LATEST"
	backupsDir   = "backups"
	sharedDir    = "shared"
	manifestName = "manifest.json"
	filesDir     = "files"
)

// layout builds the keys under one prefix.
type layout struct{ prefix string }

func newLayout(prefix string) (layout, error) {
	p := strings.Trim(prefix, "/")
	if p != "" {
		if err := validKey(p); err != nil {
			return layout{}, fmt.Errorf("backup prefix %q: %w", prefix, err)
		}
	}
	return layout{prefix: p}, nil
}

func (l layout) key(parts ...string) string {
	k := strings.Join(parts, "/")
	if l.prefix == "" {
		return k
	}
	return l.prefix + "/" + k
}

func (l layout) latest() string              { return l.key(latestName) }
func (l layout) backups() string             { return l.key(backupsDir) + "/" }
func (l layout) manifest(id string) string   { return l.key(backupsDir, id, manifestName) }
func (l layout) file(id, name string) string { return l.key(backupsDir, id, filesDir, name) }
func (l layout) shared(sha string) string    { return l.key(sharedDir, sha) }
func (l layout) sharedDir() string           { return l.key(sharedDir) + "/" }

// fileKey is where f of backup id is stored.
func (l layout) fileKey(id string, f File) string {
	if f.Shared {
		return l.shared(f.SHA256)
	}
	return l.file(id, f.Name)
}

// backupID returns the backup id a key under backups/ belongs to.
func (l layout) backupID(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, l.backups())
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return "", false
	}
	return id, true
}

// isManifest reports whether key is the manifest of backup id.
func (l layout) isManifest(key, id string) bool { return key == l.manifest(id) }

// sharedSHA returns the sha256 a key under shared/ names.
func (l layout) sharedSHA(key string) (string, bool) {
	sha, ok := strings.CutPrefix(key, l.sharedDir())
	return sha, ok && validSHA(sha)
}
