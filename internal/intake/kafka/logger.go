package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger sends franz-go's own log lines to slog (as the Kafka sink's
// does). Its warnings and errors (lost brokers, failed metadata) keep their
// level; its info lines are slog debug, and franz-go emits info only when
// slog debug is on, debug never (it is per-request chatter).
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		return kgo.LogLevelInfo
	}
	return kgo.LogLevelWarn
}

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	}
	l.log.Log(context.Background(), lv, msg, keyvals...)
}
