package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

var (
	// ErrForeignBackup: the location's LATEST belongs to another store (a
	// different store id, or a manifest this signing key cannot verify).
	// Backing up there would bury that store's backups; point this store
	// at another prefix.
	ErrForeignBackup = errors.New("backup: the prefix holds another store's backups")
	// ErrPrefixShared: since this writer's last backup, another writer
	// (same store id, different writer nonce: a second live copy of this
	// store) moved LATEST. Two writers would delete each other's files.
	ErrPrefixShared = errors.New("backup: another live writer is using this prefix")
	// ErrSecondaryFailed: the backup reached the primary location but not
	// the secondary. Run returns the manifest with it.
	ErrSecondaryFailed = errors.New("backup: secondary location failed")
)

// Run results passed to Options.OnRun.
const (
	ResultOK              = "ok"
	ResultRefused         = "refused"          // ErrForeignBackup, ErrPrefixShared
	ResultError           = "error"            // the primary did not get the backup
	ResultSecondaryFailed = "secondary_failed" // the primary did, the secondary did not
)

// Log keys.
const (
	logKeyLocation = "location"
	logKeyBackup   = "backup_id"
	logKeyErr      = "err"
)

// Checkpointer is the store being backed up. *store.Store implements it.
type Checkpointer interface {
	// Checkpoint writes a consistent copy of the store, WAL flushed, into
	// dir, which must not exist yet.
	Checkpoint(dir string) error
	// ID is the store's m:store_id.
	ID() string
}

// Options configure a Backuper.
type Options struct {
	// Primary is the location every run writes first. Required.
	Primary Store
	// Secondary, if set, gets the same backup after the primary's LATEST
	// moved.
	Secondary Store
	// Prefix is the key prefix of this store's backups in both locations
	// (e.g. "ankusa/<node id>"); empty puts them at the root.
	Prefix string
	// SigningKey signs the manifests (HMAC-SHA256); at least 16 bytes.
	// Restores and verifies need the same key.
	SigningKey []byte
	// Keep is how many complete backups each location retains; >= 1.
	Keep int
	// Store is checkpointed by every run. Required.
	Store Checkpointer
	// IntakeOffset returns the store's m:intake_offset (-1 if none): an
	// offset whose batch is already applied to the store (read the row, not
	// an in-flight value). It is called before the checkpoint is taken, so
	// the manifest never records an offset above the checkpoint's own row
	// and a replay from it can only re-apply, never skip. Nil records -1.
	IntakeOffset func() int64
	// WriterNonce identifies this process to other writers of the prefix;
	// empty mints a random one. It must differ between two live copies.
	WriterNonce string
	// TempDir holds the checkpoint while it uploads. It should be on the
	// store's filesystem so Pebble hard-links the tables instead of copying
	// them (e.g. <data_dir>/tmp/backup), and private to this Backuper: New
	// removes the checkpoints a crashed run left there. Empty means
	// os.TempDir(), where nothing is cleaned up.
	TempDir string
	// Now is the clock for manifest ids and times; nil means time.Now.
	Now func() time.Time
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// OnRun, if set, is called after every Run with one of the Result*
	// strings and the run's duration (the metrics package fills it in).
	OnRun func(result string, d time.Duration)
}

// Backuper takes backups of one store. Runs are serialised; see the package
// comment for the write order every run keeps.
type Backuper struct {
	opts Options
	l    layout
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
	// last[i] is the id of this writer's last backup at location i
	// (0 primary, 1 secondary); "" before the first.
	// REQUIRES: mu held.
	last [2]string
}

// New checks opts and returns a Backuper.
func New(opts Options) (*Backuper, error) {
	var errs []error
	if opts.Primary == nil {
		errs = append(errs, errors.New("no primary location"))
	}
	if opts.Store == nil {
		errs = append(errs, errors.New("no store to checkpoint"))
	}
	if len(opts.SigningKey) < minKeyLen {
		errs = append(errs, fmt.Errorf("signing key is %d bytes, want at least %d", len(opts.SigningKey), minKeyLen))
	}
	if opts.Keep < 1 {
		errs = append(errs, fmt.Errorf("keep is %d, want at least 1", opts.Keep))
	}
	l, err := newLayout(opts.Prefix)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("backup: %w", errors.Join(errs...))
	}
	if opts.WriterNonce == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		opts.WriterNonce = hex.EncodeToString(b[:])
	}
	if opts.TempDir == "" {
		opts.TempDir = os.TempDir()
	} else if err := removeStaleCheckpoints(opts.TempDir); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Backuper{
		opts:    opts,
		l:       l,
		log:     log.With("component", "backup"),
		now:     now,
		entropy: ulid.Monotonic(rand.Reader, 0),
	}, nil
}

// tempPattern names the directory of one run's checkpoint under TempDir.
const tempPattern = "ankusa-backup-"

// removeStaleCheckpoints deletes what crashed runs left under a private
// TempDir (hard links that would keep deleted tables on disk), creating the
// directory if needed.
func removeStaleCheckpoints(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), tempPattern) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("temp dir: %w", err)
			}
		}
	}
	return nil
}

// WriterNonce is this writer's nonce (minted by New if none was given).
func (b *Backuper) WriterNonce() string { return b.opts.WriterNonce }

// Run takes one backup: check that the locations are this writer's,
// checkpoint, upload to the primary (files, manifest, LATEST last), apply
// retention, then the same for the secondary. A failure at the secondary
// returns the manifest and an error wrapping ErrSecondaryFailed and the
// cause. A retention failure is logged, not returned: the backup is whole.
func (b *Backuper) Run(ctx context.Context) (m Manifest, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := time.Now()
	defer func() {
		if b.opts.OnRun != nil {
			b.opts.OnRun(runResult(err), time.Since(start))
		}
	}()

	storeID := b.opts.Store.ID()
	if storeID == "" {
		return Manifest{}, errors.New("backup: the store has no id")
	}
	// 1. Ownership, before anything is written anywhere.
	primaryLatest, err := b.checkOwnerLocked(ctx, 0, b.opts.Primary, storeID)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup primary: %w", err)
	}
	var secondaryLatest string
	var secondaryErr error
	if b.opts.Secondary != nil {
		secondaryLatest, secondaryErr = b.checkOwnerLocked(ctx, 1, b.opts.Secondary, storeID)
	}

	// 2. The offset before the checkpoint: the checkpoint then holds this
	// offset or a later one, and replay from it re-applies (idempotently)
	// rather than skips.
	offset := int64(-1)
	if b.opts.IntakeOffset != nil {
		offset = b.opts.IntakeOffset()
	}

	// 3. Checkpoint into a fresh directory.
	tmp, err := os.MkdirTemp(b.opts.TempDir, tempPattern+"*")
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: temp dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(tmp); rmErr != nil {
			b.log.Warn("backup: removing the checkpoint copy failed", "dir", tmp, logKeyErr, rmErr)
		}
	}()
	cp := filepath.Join(tmp, "checkpoint")
	if err := b.opts.Store.Checkpoint(cp); err != nil {
		return Manifest{}, fmt.Errorf("backup: checkpoint: %w", err)
	}
	files, err := scanCheckpoint(cp)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}

	// 4. The manifest, with an id above every LATEST seen so ids keep
	// sorting by age even if the clock stepped back.
	now := b.now().UTC()
	id, err := b.newIDLocked(now, primaryLatest, secondaryLatest)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: id: %w", err)
	}
	m = Manifest{
		Version:      ManifestVersion,
		ID:           id,
		CreatedAt:    now,
		StoreID:      storeID,
		WriterNonce:  b.opts.WriterNonce,
		IntakeOffset: offset,
		Files:        files,
	}
	env, err := encodeManifest(m, b.opts.SigningKey)
	if err != nil {
		return Manifest{}, fmt.Errorf("backup: %w", err)
	}

	// 5. Primary, then secondary.
	if err := b.pushLocked(ctx, 0, b.opts.Primary, cp, m, env); err != nil {
		return Manifest{}, fmt.Errorf("backup %s to primary: %w", id, err)
	}
	if b.opts.Secondary != nil {
		if secondaryErr == nil {
			secondaryErr = b.pushLocked(ctx, 1, b.opts.Secondary, cp, m, env)
		}
		if secondaryErr != nil {
			return m, fmt.Errorf("backup %s: %w: %w", id, ErrSecondaryFailed, secondaryErr)
		}
	}
	b.log.Info("backup taken", logKeyBackup, id, "files", len(m.Files), "bytes", m.Bytes(), "intake_offset", offset)
	return m, nil
}

func locationName(i int) string {
	if i == 0 {
		return "primary"
	}
	return "secondary"
}

func runResult(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case errors.Is(err, ErrSecondaryFailed):
		return ResultSecondaryFailed
	case errors.Is(err, ErrForeignBackup), errors.Is(err, ErrPrefixShared):
		return ResultRefused
	default:
		return ResultError
	}
}

// checkOwnerLocked reads the location's LATEST and refuses a location that
// is not this writer's; it returns LATEST's id ("" if none).
//
// REQUIRES: b.mu held.
func (b *Backuper) checkOwnerLocked(ctx context.Context, i int, loc Store, storeID string) (string, error) {
	id, err := readLatest(ctx, loc, b.l)
	if errors.Is(err, ErrNoBackup) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	m, err := readManifest(ctx, loc, b.l, id, b.opts.SigningKey)
	if errors.Is(err, ErrBadSignature) {
		return "", fmt.Errorf("%w: LATEST %s was not signed with this signing key (%w)", ErrForeignBackup, id, err)
	}
	if err != nil {
		return "", fmt.Errorf("LATEST: %w", err)
	}
	if m.StoreID != storeID {
		return "", fmt.Errorf("%w: LATEST %s is a backup of store %s, this is store %s", ErrForeignBackup, id, m.StoreID, storeID)
	}
	// A process that restarted has a new nonce and no last backup: it
	// takes over its predecessor's prefix. Once this writer has written,
	// only it moves LATEST.
	if m.WriterNonce != b.opts.WriterNonce && b.last[i] != "" {
		return "", fmt.Errorf("%w: LATEST %s was written by writer %s after this writer's backup %s", ErrPrefixShared, id, m.WriterNonce, b.last[i])
	}
	return id, nil
}

// newIDLocked mints a ULID for now that sorts after every id in floor.
//
// REQUIRES: b.mu held.
func (b *Backuper) newIDLocked(now time.Time, floor ...string) (string, error) {
	ms := ulid.Timestamp(now)
	for _, f := range floor {
		if f == "" {
			continue
		}
		if fid, err := ulid.ParseStrict(f); err == nil && fid.Time() >= ms {
			ms = fid.Time() + 1
		}
	}
	id, err := ulid.New(ms, b.entropy)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// pushLocked writes one backup to loc in the package's write order, then
// applies retention.
//
// REQUIRES: b.mu held.
func (b *Backuper) pushLocked(ctx context.Context, i int, loc Store, cp string, m Manifest, env []byte) error {
	// Rule 1: every file before the manifest.
	for _, f := range m.Files {
		key := b.l.fileKey(m.ID, f)
		if f.Shared {
			ok, err := loc.Exists(ctx, key)
			if err != nil {
				return err
			}
			if ok {
				continue // content-addressed: already stored by an earlier backup
			}
		}
		if err := putFile(ctx, loc, key, filepath.Join(cp, filepath.FromSlash(f.Name)), f); err != nil {
			return err
		}
	}
	// Rule 2: the manifest, then LATEST last.
	if err := loc.Put(ctx, b.l.manifest(m.ID), bytes.NewReader(env)); err != nil {
		return err
	}
	if err := loc.Put(ctx, b.l.latest(), strings.NewReader(m.ID)); err != nil {
		return err
	}
	b.last[i] = m.ID
	// Rule 3: retention only after LATEST moved.
	if err := retain(ctx, loc, b.l, m.ID, b.opts.Keep, b.log); err != nil {
		b.log.Warn("backup retention failed; the backup itself is complete", logKeyBackup, m.ID, logKeyLocation, locationName(i), logKeyErr, err)
	}
	return nil
}

// putFile uploads the local file p under key and checks that what was read
// is what the manifest says; if not, the object is deleted again so a
// content-addressed key never holds other content.
func putFile(ctx context.Context, loc Store, key, p string, want File) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(f, h)}
	if err := loc.Put(ctx, key, cr); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); cr.n != want.Size || got != want.SHA256 {
		_ = loc.Delete(ctx, key)
		return fmt.Errorf("upload %s: %s changed while uploading (size %d sha256 %s, want %d %s)", key, want.Name, cr.n, got, want.Size, want.SHA256)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// isShared reports whether a checkpoint file is immutable table data, stored
// once by content: Pebble's sstables and blob files never change once
// written, and a checkpoint hard-links them, so consecutive backups share
// most of their bytes. Everything else (MANIFEST, OPTIONS, WAL, markers)
// goes per backup.
func isShared(name string) bool {
	ext := filepath.Ext(name)
	return ext == ".sst" || ext == ".blob"
}

// scanCheckpoint lists the files of a checkpoint with their sizes and hashes,
// sorted by name.
func scanCheckpoint(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("checkpoint file %s is not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if err := validName(name); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		size, sha, err := hashFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Name: name, Size: size, SHA256: sha, Shared: isShared(name)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan checkpoint: %w", err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

func hashFile(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
