package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// ErrVerifyFailed: Verify found at least one problem; the report says which.
var ErrVerifyFailed = errors.New("backup: verification failed")

// VerifyReport is what Verify found at one location and prefix.
type VerifyReport struct {
	// Latest is the id LATEST names ("" if none).
	Latest string
	// Problems not tied to one backup (LATEST unreadable or dangling).
	Problems []string
	// Backups, oldest first, incomplete ones included.
	Backups []BackupCheck
	// UnreferencedShared are shared files no manifest names: garbage the
	// next retention pass removes, not a problem.
	UnreferencedShared []string
}

// BackupCheck is Verify's verdict on one backup.
type BackupCheck struct {
	ID string
	// Incomplete backups have files but no manifest: a run that failed
	// before its manifest. Not a problem; retention removes them.
	Incomplete bool
	Files      int
	Bytes      int64
	Problems   []string
}

// OK reports whether the report holds no problem.
func (r VerifyReport) OK() bool { return r.problems() == 0 }

func (r VerifyReport) problems() int {
	n := len(r.Problems)
	for _, b := range r.Backups {
		n += len(b.Problems)
	}
	return n
}

// Verify checks every backup under prefix at loc, for `ankusa backup
// verify`: each manifest's signature with signingKey, and each file it
// names (present, right size, right sha256: every byte is read once, shared
// files once in all). The error wraps ErrVerifyFailed when the report has
// problems, and is another error when the location could not be listed.
func Verify(ctx context.Context, loc Store, prefix string, signingKey []byte) (VerifyReport, error) {
	var rep VerifyReport
	l, err := newLayout(prefix)
	if err != nil {
		return rep, err
	}
	all, err := listBackups(ctx, loc, l)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	complete := map[string]bool{}
	for _, b := range all {
		complete[b.id] = b.complete
	}
	switch latest, err := readLatest(ctx, loc, l); {
	case errors.Is(err, ErrNoBackup):
		if len(all) > 0 {
			rep.Problems = append(rep.Problems, "no LATEST, but backups are present")
		}
	case err != nil:
		rep.Problems = append(rep.Problems, fmt.Sprintf("LATEST: %v", err))
	default:
		rep.Latest = latest
		if !complete[latest] {
			rep.Problems = append(rep.Problems, fmt.Sprintf("LATEST names backup %s, which has no manifest", latest))
		}
	}

	checked := map[string]error{} // key → result, so shared files are read once
	referenced := map[string]bool{}
	for _, b := range all {
		c := BackupCheck{ID: b.id, Incomplete: !b.complete}
		if b.complete {
			m, err := readManifest(ctx, loc, l, b.id, signingKey)
			if err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("manifest: %v", err))
			} else {
				c.Files, c.Bytes = len(m.Files), m.Bytes()
				for _, f := range m.Files {
					key := l.fileKey(m.ID, f)
					if f.Shared {
						referenced[f.SHA256] = true
					}
					res, seen := checked[key]
					if !seen {
						res = checkObject(ctx, loc, key, f)
						checked[key] = res
					}
					if res != nil {
						c.Problems = append(c.Problems, fmt.Sprintf("file %s: %v", f.Name, res))
					}
				}
			}
		}
		rep.Backups = append(rep.Backups, c)
	}
	if ctx.Err() != nil {
		return rep, fmt.Errorf("verify: %w", ctx.Err())
	}
	shared, err := loc.List(ctx, l.sharedDir())
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	for _, k := range shared {
		if sha, ok := l.sharedSHA(k); ok && !referenced[sha] {
			rep.UnreferencedShared = append(rep.UnreferencedShared, k)
		}
	}
	if n := rep.problems(); n > 0 {
		return rep, fmt.Errorf("%w: %d problem(s)", ErrVerifyFailed, n)
	}
	return rep, nil
}

// checkObject reads key in full and compares it with f.
func checkObject(ctx context.Context, loc Store, key string, f File) error {
	r, err := loc.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("missing (%s)", key)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx: ctx, r: r})
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("%w: %d bytes, want %d", ErrChecksum, n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("%w: sha256 %s, want %s", ErrChecksum, got, f.SHA256)
	}
	return nil
}

// Listing is one backup as List shows it.
type Listing struct {
	ID       string
	Latest   bool // LATEST names it
	Complete bool // has a manifest
	// Manifest is the decoded manifest, signature NOT verified (List has
	// no key; use Verify). Zero if incomplete or unreadable.
	Manifest Manifest
	// Problem says why a complete backup's manifest could not be read.
	Problem string
}

// List returns the backups under prefix at loc, oldest first, for `ankusa
// backup list`. It reads each manifest but verifies nothing; an unreadable
// manifest is reported in its Listing, not as an error.
func List(ctx context.Context, loc Store, prefix string) ([]Listing, error) {
	l, err := newLayout(prefix)
	if err != nil {
		return nil, err
	}
	all, err := listBackups(ctx, loc, l)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	latest, err := readLatest(ctx, loc, l)
	if err != nil && !errors.Is(err, ErrNoBackup) && !errors.Is(err, ErrCorrupt) {
		return nil, fmt.Errorf("list: %w", err)
	}
	out := make([]Listing, 0, len(all))
	for _, b := range all {
		li := Listing{ID: b.id, Latest: b.id == latest, Complete: b.complete}
		if b.complete {
			m, err := readManifest(ctx, loc, l, b.id, nil)
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("list: %w", ctx.Err())
				}
				li.Problem = err.Error()
			} else {
				li.Manifest = m
			}
		}
		out = append(out, li)
	}
	return out, nil
}
