package backup_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestZZProbe(t *testing.T) {
	f := newFakeS3(t)
	raw := f.newBucket(t)
	s := f.open(t, raw)
	big := make([]byte, 18<<20)
	boom := errors.New("boom")
	pr, pw := io.Pipe()
	go func() {
		pw.Write(big)
		time.Sleep(500 * time.Millisecond) // parts in flight land
		pw.CloseWithError(boom)
	}()
	err := s.Put(context.Background(), "p/x", io.MultiReader(bytes.NewReader(nil), pr))
	t.Logf("Put err: %v; multipart %v", err, f.multipart)
	time.Sleep(200 * time.Millisecond)
	bucket := strings.TrimPrefix(strings.SplitN(raw, "?", 2)[0], "s3://")
	resp, err := http.Get(f.srv.URL + "/" + bucket + "?uploads")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	t.Logf("uploads: %s", b)
}
