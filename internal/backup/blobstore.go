package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// blobStore adapts a gocloud.dev *blob.Bucket (s3://, and memblob in tests)
// to Store. Object stores publish an object atomically when its upload
// completes, and gocloud aborts an upload whose context is cancelled before
// Writer.Close, which is how a failed read from r leaves nothing behind.
type blobStore struct {
	b *blob.Bucket
}

var _ Store = (*blobStore)(nil)

// NewBlobStore adapts an open bucket. The caller keeps ownership of b and
// closes it.
func NewBlobStore(b *blob.Bucket) Store { return &blobStore{b: b} }

// Put implements Store.
func (s *blobStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := validKey(key); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.b.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType:                 "application/octet-stream",
		DisableContentTypeDetection: true,
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	_, err = io.Copy(w, ctxReader{ctx: ctx, r: r})
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel() // abort the upload before Close can commit it
		_ = w.Close()
		return fmt.Errorf("put %s: write: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get implements Store.
func (s *blobStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	r, err := s.b.NewReader(ctx, key, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return r, nil
}

// List implements Store.
func (s *blobStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validListPrefix(prefix); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	var keys []string
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		if !obj.IsDir {
			keys = append(keys, obj.Key)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Delete implements Store.
func (s *blobStore) Delete(ctx context.Context, key string) error {
	if err := validKey(key); err != nil {
		return err
	}
	err := s.b.Delete(ctx, key)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Exists implements Store.
func (s *blobStore) Exists(ctx context.Context, key string) (bool, error) {
	if err := validKey(key); err != nil {
		return false, err
	}
	ok, err := s.b.Exists(ctx, key)
	if err != nil {
		return false, fmt.Errorf("exists %s: %w", key, err)
	}
	return ok, nil
}
