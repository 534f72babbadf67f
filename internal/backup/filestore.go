package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// errNotDirSyscall is what the OS answers when a key's parent is an object
// rather than a directory: for reads, the key simply does not exist.
var errNotDirSyscall = syscall.ENOTDIR

// fileStore is a Store over a local directory (the file:// scheme) that
// survives a power cut at any point.
//
// Durability protocol of Put, in order (each step is why the next is safe):
//  1. the parents of the object are created and every directory created is
//     fsynced into its own parent, so the path itself survives;
//  2. the bytes go to a temporary file (tmpPrefix + random) in the object's
//     own directory, never to the object's name;
//  3. the temporary file is fsynced and closed: its content is on disk;
//  4. it is renamed over the object's name: readers see the old object or
//     the new one, never a part;
//  5. the directory is fsynced: the rename itself is on disk.
//
// On any failure before step 4 the temporary file is removed, so a failed
// Put leaves nothing behind; a crash before step 4 leaves at most a
// temporary file, which List skips and no key can name.
//
// Rejected: gocloud's fileblob. It follows steps 2 and 4 but fsyncs neither
// the file nor the directory, so after a power cut LATEST could name a
// manifest whose bytes never reached the disk.
type fileStore struct {
	root string
	// syncFile and syncDir are the fsync seams: tests count or fail them.
	syncFile func(f *os.File) error
	syncDir  func(dir string) error
}

var _ Store = (*fileStore)(nil)

// NewFileStore returns a crash-safe Store rooted at the absolute directory
// root. The directory is created (synced) by the first Put; until then the
// location reads as empty.
func NewFileStore(root string) (Store, error) {
	return newFileStore(root)
}

func newFileStore(root string) (*fileStore, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("file store: root %q is not an absolute path", root)
	}
	return &fileStore{
		root:     filepath.Clean(root),
		syncFile: func(f *os.File) error { return f.Sync() },
		syncDir:  fsyncDir,
	}, nil
}

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

func (s *fileStore) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// Put implements Store; see the protocol on fileStore.
func (s *fileStore) Put(ctx context.Context, key string, r io.Reader) (err error) {
	if err := validKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	p := s.path(key)
	dir := filepath.Dir(p)
	// 1. parents.
	if err := s.mkdirAll(dir); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	// 2. temporary file beside the object.
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	tmp, closed := f.Name(), false
	defer func() {
		if err != nil {
			if !closed {
				_ = f.Close()
			}
			_ = os.Remove(tmp)
		}
	}()
	if _, err = io.Copy(f, ctxReader{ctx: ctx, r: r}); err != nil {
		return fmt.Errorf("put %s: write: %w", key, err)
	}
	// 3. content on disk.
	if err = s.syncFile(f); err != nil {
		return fmt.Errorf("put %s: fsync: %w", key, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("put %s: close: %w", key, err)
	}
	if err = ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	// 4. publish.
	if err = os.Rename(tmp, p); err != nil {
		return fmt.Errorf("put %s: rename: %w", key, err)
	}
	// 5. the rename on disk. The object is visible now; an error here
	// means it may not survive a power cut, and the caller must not count
	// on it (the contract allows old or new content, never partial).
	if err := s.syncDir(dir); err != nil {
		return fmt.Errorf("put %s: fsync dir: %w", key, err)
	}
	return nil
}

// mkdirAll creates dir and its missing parents, fsyncing the parent of every
// directory it created.
func (s *fileStore) mkdirAll(dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		p := filepath.Dir(d)
		if p == d {
			break
		}
		d = p
	}
	if len(created) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	// Deepest first is fine: every parent exists now.
	for _, d := range created {
		if err := s.syncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("fsync dir %s: %w", filepath.Dir(d), err)
		}
	}
	return nil
}

// Get implements Store.
func (s *fileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDirSyscall) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return f, nil
}

// List implements Store: it walks the deepest directory the prefix names in
// full and skips temporary files.
func (s *fileStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validListPrefix(prefix); err != nil {
		return nil, err
	}
	base := s.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = s.path(prefix[:i])
	}
	var keys []string
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == base && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDirSyscall)) {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// Delete implements Store. The directory is fsynced so a deletion retention
// relies on (a manifest before the files it names) is not undone by a power
// cut; directories left empty are pruned on a best-effort basis.
func (s *fileStore) Delete(ctx context.Context, key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	p := s.path(key)
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		return nil // a directory of other keys, not an object
	}
	err := os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDirSyscall) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	dir := filepath.Dir(p)
	if err := s.syncDir(dir); err != nil {
		return fmt.Errorf("delete %s: fsync dir: %w", key, err)
	}
	for d := dir; d != s.root && strings.HasPrefix(d, s.root+string(filepath.Separator)); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break // not empty (or racing a Put): keep it
		}
	}
	return nil
}

// Exists implements Store.
func (s *fileStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := validKey(key); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("exists %s: %w", key, err)
	}
	fi, err := os.Stat(s.path(key))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDirSyscall) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("exists %s: %w", key, err)
	}
	return fi.Mode().IsRegular(), nil
}

// ctxReader stops a copy when ctx is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
