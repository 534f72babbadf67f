package backup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// retain applies keep retention at loc after backup latest became LATEST:
//
//  1. keep the newest keep complete backups, and latest whatever its age;
//  2. delete every older complete backup, its manifest first, so a crash
//     midway leaves either a whole backup or an incomplete one (never a
//     manifest naming deleted files);
//  3. delete incomplete backups older than latest: leftovers of runs that
//     failed before their manifest (newer ones may be in flight elsewhere);
//  4. delete every shared file that no kept manifest names. If any kept
//     manifest cannot be read, no shared file is deleted: unsure means keep.
func retain(ctx context.Context, loc Store, l layout, latest string, keep int, log *slog.Logger) error {
	all, err := listBackups(ctx, loc, l)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	var complete []*backupKeys
	for _, b := range all {
		if b.complete {
			complete = append(complete, b)
		}
	}
	kept := keptSet(complete, latest, keep)

	var errs []error
	for _, b := range all {
		if kept[b.id] {
			continue
		}
		if !b.complete && b.id > latest {
			continue // rule 3: maybe in flight
		}
		if err := deleteBackup(ctx, loc, l, b); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("backup deleted by retention", logKeyBackup, b.id, "complete", b.complete)
	}

	// Rule 4.
	referenced := map[string]bool{}
	for _, b := range complete {
		if !kept[b.id] {
			continue
		}
		m, err := readManifest(ctx, loc, l, b.id, nil)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("retention: shared files kept, manifest %s unreadable: %w", b.id, err))...)
		}
		for _, f := range m.Files {
			if f.Shared {
				referenced[f.SHA256] = true
			}
		}
	}
	shared, err := loc.List(ctx, l.sharedDir())
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("retention: %w", err))...)
	}
	for _, k := range shared {
		sha, ok := l.sharedSHA(k)
		if !ok || referenced[sha] {
			continue
		}
		if err := loc.Delete(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("retention: %w", err))
		}
	}
	return errors.Join(errs...)
}

// keptSet is latest plus the newest other complete backups, keep in all.
func keptSet(complete []*backupKeys, latest string, keep int) map[string]bool {
	kept := map[string]bool{latest: true}
	for i := len(complete) - 1; i >= 0 && len(kept) < keep; i-- {
		kept[complete[i].id] = true
	}
	return kept
}

// deleteBackup removes one backup's keys, its manifest first.
func deleteBackup(ctx context.Context, loc Store, l layout, b *backupKeys) error {
	if b.complete {
		if err := loc.Delete(ctx, l.manifest(b.id)); err != nil {
			return fmt.Errorf("retention: delete backup %s: %w", b.id, err)
		}
	}
	for _, k := range b.keys {
		if l.isManifest(k, b.id) {
			continue
		}
		if err := loc.Delete(ctx, k); err != nil {
			return fmt.Errorf("retention: delete backup %s: %w", b.id, err)
		}
	}
	return nil
}
