package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
)

// RestoreIfEmpty restores the latest backup into dir when dir is missing or
// empty, trying locs in order (RestoreFirst). It reports whether a restore
// happened. A location that cannot be read refuses the boot: starting
// fresh could forget the hooks it holds. No backup anywhere starts fresh.
func RestoreIfEmpty(ctx context.Context, locs []Store, prefix, dir string, signingKey []byte, log *slog.Logger) (bool, error) {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return false, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", dir, err)
	}
	m, used, err := RestoreFirst(ctx, locs, prefix, dir, signingKey)
	if errors.Is(err, ErrNoBackup) {
		log.Info("no backup to restore; starting a fresh store", "prefix", prefix)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("restore from backup: %w", err)
	}
	log.Warn("store restored from backup", "backup", m.ID, "created_at", m.CreatedAt, "intake_offset", m.IntakeOffset, "location", used)
	return true, nil
}

// Incarnations is the store's incarnation as minting needs it (the store's
// meta rows, m:incarnation and m:incarnation_from).
type Incarnations interface {
	// IncarnationFrom is the id of the backup the current incarnation was
	// minted for, "" before any restore.
	IncarnationFrom() (string, error)
	// SetIncarnation records inc as minted for backup from, synced.
	SetIncarnation(inc, from string) error
}

// MintIncarnation gives a restored store a new incarnation (DUR-6), once
// per restore: records written after a restore are told apart from the
// lost node's. dir is the store directory holding the restore marker.
//
// It reports whether the store is (still) a restored one: the marker stays
// until the boot no longer needs it (RemoveMarker; under wal.type: dual
// only once boot recovery succeeded), so a refused recovery (a truncated
// log) is refused again at every boot instead of passing as an ordinary
// restart; the incarnation minted for that backup is kept, not minted again.
func MintIncarnation(st Incarnations, dir string) (restored bool, err error) {
	id, ok, err := ReadMarker(dir)
	if err != nil || !ok {
		return false, err
	}
	if from, _ := st.IncarnationFrom(); from == id {
		return true, nil
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	if err := st.SetIncarnation(hex.EncodeToString(raw[:]), id); err != nil {
		return true, fmt.Errorf("mint incarnation: %w", err)
	}
	return true, nil
}
