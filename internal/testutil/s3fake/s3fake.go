// Package s3fake starts gofakes3 (an in-process S3-compatible fake with an
// in-memory backend) on 127.0.0.1 for tests of s3:// locations: no real S3
// can be reached here. internal/backup's own S3 tests keep a richer copy
// that also counts multipart requests.
package s3fake

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is one fake S3 endpoint.
type Server struct {
	backend *s3mem.Backend
	srv     *httptest.Server
	n       atomic.Int64
}

// New starts the fake and points the AWS SDK's credential chain at static
// test credentials (and away from any shared config, profile or instance
// metadata on the host). It uses t.Setenv: the test must not be parallel.
func New(t *testing.T) *Server {
	t.Helper()
	none := filepath.Join(t.TempDir(), "no-such-aws-file")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIAFAKES3TEST", "AWS_SECRET_ACCESS_KEY": "gofakes3-test-secret",
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "", "AWS_REGION": "",
		"AWS_DEFAULT_REGION": "", "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_S3": "",
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	s := &Server{backend: s3mem.New()}
	s.srv = httptest.NewServer(gofakes3.New(s.backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(s.srv.Close)
	return s
}

// Bucket creates a fresh bucket and returns its s3:// URL as an operator
// would write it.
func (s *Server) Bucket(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("ankusa-test-%d", s.n.Add(1))
	if err := s.backend.CreateBucket(name); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	q := url.Values{}
	q.Set("endpoint", s.srv.URL)
	q.Set("region", "us-east-1")
	q.Set("use_path_style", "true")
	q.Set("disable_https", "true")
	return "s3://" + name + "?" + q.Encode()
}
