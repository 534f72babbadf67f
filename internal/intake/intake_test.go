package intake_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/intake"
)

// IsTransient is true for a classified outage only: an unclassified error
// (which ClassOf reads as Unavailable) is not, so boot recovery never
// retries a store failure as if it were the log.
func TestIsTransient(t *testing.T) {
	throttled := &intake.Error{Class: intake.Throttled, RetryAfter: 3 * time.Second, Err: errors.New("slow down")}
	for _, tc := range []struct {
		name  string
		err   error
		want  bool
		after time.Duration
	}{
		{"nil", nil, false, 0},
		{"unclassified", errors.New("store: write failed"), false, 0},
		{"unavailable", intake.Errorf(intake.Unavailable, "no quorum"), true, 0},
		{"unavailable wrapped", fmt.Errorf("earliest position: %w", intake.Errorf(intake.Unavailable, "503")), true, 0},
		{"throttled keeps its retry-after", fmt.Errorf("replay: %w", throttled), true, 3 * time.Second},
		{"not found", intake.Errorf(intake.NotFound, "no stream"), false, 0},
		{"permanent", intake.Errorf(intake.Permanent, "too large"), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, after := intake.IsTransient(tc.err)
			if got != tc.want || after != tc.after {
				t.Fatalf("IsTransient(%v) = %v, %v; want %v, %v", tc.err, got, after, tc.want, tc.after)
			}
		})
	}
}
