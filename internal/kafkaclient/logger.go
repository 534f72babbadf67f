package kafkaclient

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Logger sends franz-go's own log lines to log (kgo.WithLogger(Logger(l))).
// Its warnings and errors (lost brokers, failed metadata) keep their level;
// its info and debug lines are slog debug, and franz-go emits info only when
// slog debug is on, debug never (it is per-request chatter).
func Logger(log *slog.Logger) kgo.Logger { return kgoLogger{log} }

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
