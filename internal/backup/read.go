package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/oklog/ulid/v2"
)

// ErrNoBackup: the location holds no LATEST, so there is nothing to restore
// (the caller starts a fresh store). An unreadable location is a different
// error.
var ErrNoBackup = errors.New("backup: no backup at this location")

// maxManifestBytes bounds what is read as a manifest (a checkpoint has tens
// of files, not millions).
const maxManifestBytes = 16 << 20

// readSmall reads a whole object of at most limit bytes.
func readSmall(ctx context.Context, loc Store, key string, limit int64) ([]byte, error) {
	r, err := loc.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, key, limit)
	}
	return b, nil
}

// readLatest returns the backup id LATEST names; ErrNoBackup if there is no
// LATEST.
func readLatest(ctx context.Context, loc Store, l layout) (string, error) {
	b, err := readSmall(ctx, loc, l.latest(), 1024)
	if errors.Is(err, ErrNotFound) {
		return "", ErrNoBackup
	}
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if _, err := ulid.ParseStrict(id); err != nil {
		return "", fmt.Errorf("%w: %s holds %q, not a backup id", ErrCorrupt, l.latest(), id)
	}
	return id, nil
}

// readManifest reads and decodes the manifest of backup id, verifying its
// signature unless key is nil.
func readManifest(ctx context.Context, loc Store, l layout, id string, key []byte) (Manifest, error) {
	b, err := readSmall(ctx, loc, l.manifest(id), maxManifestBytes)
	if errors.Is(err, ErrNotFound) {
		return Manifest{}, fmt.Errorf("%w: backup %s has no manifest", ErrCorrupt, id)
	}
	if err != nil {
		return Manifest{}, err
	}
	m, err := decodeManifest(b, key)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup %s: %w", id, err)
	}
	if m.ID != id {
		return Manifest{}, fmt.Errorf("%w: manifest under %s names backup %s", ErrCorrupt, id, m.ID)
	}
	return m, nil
}

// backupKeys groups the keys under backups/ by backup id.
type backupKeys struct {
	id       string
	complete bool // has a manifest
	keys     []string
}

// listBackups returns every backup under the prefix, oldest first.
func listBackups(ctx context.Context, loc Store, l layout) ([]*backupKeys, error) {
	keys, err := loc.List(ctx, l.backups())
	if err != nil {
		return nil, err
	}
	var out []*backupKeys
	byID := map[string]*backupKeys{}
	for _, k := range keys {
		id, ok := l.backupID(k)
		if !ok {
			continue // not ours to interpret, nor to delete
		}
		b := byID[id]
		if b == nil {
			b = &backupKeys{id: id}
			byID[id] = b
			out = append(out, b)
		}
		b.keys = append(b.keys, k)
		if l.isManifest(k, id) {
			b.complete = true
		}
	}
	// keys are sorted and ids are fixed-width, so out is sorted by id.
	return out, nil
}
