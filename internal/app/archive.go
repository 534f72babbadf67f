package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/ankusa/ankusa/internal/archive"
	"github.com/ankusa/ankusa/internal/backup"
	"github.com/ankusa/ankusa/internal/config"
	"github.com/ankusa/ankusa/internal/edge"
	"github.com/ankusa/ankusa/internal/store"
)

// openArchive opens archive.url through the backup package's blob layer
// (the same schemes and checks as backup.primary). The bucket is closed by
// the returned func once dispatch has stopped.
func openArchive(ctx context.Context, cfg *config.Config, log *slog.Logger) (*archive.Archive, func(), error) {
	b, err := backup.OpenBucket(ctx, cfg.Archive.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("archive.url: %w", err)
	}
	a, err := archive.New(archive.Options{
		Store: b, Prefix: cfg.BackupPrefix(), SigningKey: []byte(cfg.ArchiveSigningKey()), Logger: log,
	})
	if err != nil {
		_ = b.Close()
		return nil, nil, err
	}
	return a, func() { _ = b.Close() }, nil
}

// archiveRoute resolves the sinks an archive replay owes a hook from its
// source's current configuration (ADR: as log replay does).
func archiveRoute(sources func() *edge.Registry) func(string) ([]store.DueSink, bool) {
	return func(id string) ([]store.DueSink, bool) {
		s, ok := sources().Get(id)
		if !ok {
			return nil, false
		}
		return append([]store.DueSink(nil), s.Sinks...), true
	}
}
