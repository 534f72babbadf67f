package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNotFound is returned (wrapped) by Store.Get for a key that holds no
// object.
var ErrNotFound = errors.New("backup: object not found")

// ErrInvalidKey is returned by every Store method given a key this package
// would never write: empty, absolute, with empty, "." or ".." segments, a
// backslash or NUL, or a segment starting with tmpPrefix (reserved for the
// file store's temporary files).
var ErrInvalidKey = errors.New("backup: invalid key")

// Store is a backup location: a flat namespace of immutable-once-written
// objects named by "/"-separated keys. It is the only thing the backup and
// restore code needs from object storage, so one contract suite
// (backuptest.Run) checks every implementation.
//
// Error contract, for every method: a cancelled ctx aborts the call and its
// error wraps ctx.Err(); any other error means the location could not be
// read or written and is worth retrying later (the caller decides). No error
// is permanent in itself except ErrInvalidKey.
type Store interface {
	// Put stores the whole of r under key, replacing any previous object.
	// It is atomic: on success Get returns exactly the bytes read from r
	// and they are durable; on error the key holds its previous object or
	// the new one, never a part of either (a failed read from r, a failed
	// write and a cancelled ctx all leave no partial object behind).
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the object under key. A missing key is an error wrapping
	// ErrNotFound. The caller closes the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns, sorted, every key that starts with prefix (a plain
	// string prefix, not a directory: "a/b" matches "a/bc/d"). A prefix
	// that matches nothing gives an empty list and no error.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes the object under key. A missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Exists reports whether an object is stored under key.
	Exists(ctx context.Context, key string) (bool, error)
}

// tmpPrefix starts the name of every temporary file the file store creates;
// keys may not use it so List never confuses one with an object.
const tmpPrefix = ".tmp-"

// validKey checks a key against the rules of ErrInvalidKey.
func validKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if strings.ContainsAny(key, "\\\x00") {
		return fmt.Errorf("%w: %q contains a backslash or NUL", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, key, seg)
		case strings.HasPrefix(seg, tmpPrefix):
			return fmt.Errorf("%w: %q uses the reserved %q prefix", ErrInvalidKey, key, tmpPrefix)
		}
	}
	return nil
}

// validListPrefix checks a List prefix: empty, or a key, or a key followed
// by "/", or a key whose last segment is partial.
func validListPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return validKey(strings.TrimSuffix(prefix, "/"))
}
