package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// newLogger returns a logger at level writing to w: human-readable when w is
// a terminal, one JSON object per line otherwise.
func newLogger(w io.Writer, level zerolog.Level) zerolog.Logger {
	if f, ok := w.(*os.File); ok && IsTerminal(f) {
		w = zerolog.ConsoleWriter{Out: f, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// IsTerminal reports whether f is a terminal (not merely a character
// device: /dev/null is none).
func IsTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// serverLogger sends the embedded nats-server's log to zerolog. The server's
// notices (many at start-up) become debug events and its debug and trace
// output trace events. The first fatal error is also kept in fatal, so `up`
// can say why the server did not start.
type serverLogger struct {
	log   zerolog.Logger
	Fatal chan string // buffered, 1
}

func NewServerLogger(log zerolog.Logger) *serverLogger {
	return &serverLogger{log: log.With().Str("component", "nats-server").Logger(), Fatal: make(chan string, 1)}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error().Msg(msg)
	select {
	case l.Fatal <- msg:
	default:
	}
}
