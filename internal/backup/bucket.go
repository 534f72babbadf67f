package backup

import (
	"context"
	"fmt"
	"net/url"

	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// Bucket is an opened backup location (a Store) with what must be closed.
type Bucket struct {
	Store
	url   string // redacted, for logs
	close func() error
}

// String is the location's URL with any password redacted.
func (b *Bucket) String() string { return b.url }

// Close releases the location's resources (an s3 client); a file location
// has none.
func (b *Bucket) Close() error {
	if b.close == nil {
		return nil
	}
	return b.close()
}

// OpenBucket opens a backup location by URL. Two schemes are wired, here and
// nowhere else (no init() registry is consulted):
//
//   - file:///abs/dir: a directory on this host, through the crash-safe
//     file store (see fileStore). No query parameters are accepted.
//   - s3://bucket?region=…&endpoint=…&use_path_style=true&prefix=…: S3 or an
//     S3-compatible store (MinIO, R2), through gocloud's s3blob with the AWS
//     SDK's usual credential chain; the parameters are gocloud's.
//
// Opening does not touch the location: an unreachable one fails at first use.
func OpenBucket(ctx context.Context, rawURL string) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open backup location: %w", err)
	}
	shown := u.Redacted()
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("open backup location %s: file URL must have an empty host (file:///abs/dir)", shown)
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("open backup location %s: file URL takes no query parameters", shown)
		}
		s, err := NewFileStore(u.Path)
		if err != nil {
			return nil, fmt.Errorf("open backup location %s: %w", shown, err)
		}
		return &Bucket{Store: s, url: shown}, nil
	case s3blob.Scheme:
		mux := new(blob.URLMux)
		mux.RegisterBucket(s3blob.Scheme, new(s3blob.URLOpener))
		b, err := mux.OpenBucketURL(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("open backup location %s: %w", shown, err)
		}
		return &Bucket{Store: NewBlobStore(b), url: shown, close: b.Close}, nil
	default:
		return nil, fmt.Errorf("open backup location %s: unsupported scheme %q (want file or s3)", shown, u.Scheme)
	}
}
