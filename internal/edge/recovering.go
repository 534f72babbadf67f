package edge

import (
	"net/http"
	"strconv"
)

// RefuseWhile answers every request 503 intake_unavailable (reason
// "recovering", Retry-After retryAfterSecs, at least 1) while recovering()
// is true, and passes it to h otherwise: nothing may be committed before
// boot recovery has put the log's tail in the store.
func RefuseWhile(recovering func() bool, retryAfterSecs int, h http.Handler) http.Handler {
	retryAfter := strconv.Itoa(max(retryAfterSecs, 1))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if recovering() {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"intake_unavailable","reason":"recovering"}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}
