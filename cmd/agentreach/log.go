package main

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
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		w = zerolog.ConsoleWriter{Out: f, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// isTerminal reports whether f is a terminal (not merely a character
// device: /dev/null is none).
func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// serverLogger sends the embedded nats-server's log to zerolog. The server's
// notices (many at start-up) become debug events and its debug and trace
// output trace events. The first fatal error is also kept in fatal, so `up`
// can say why the server did not start.
type serverLogger struct {
	log   zerolog.Logger
	fatal chan string // buffered, 1
}

func newServerLogger(log zerolog.Logger) *serverLogger {
	return &serverLogger{log: log.With().Str("component", "nats-server").Logger(), fatal: make(chan string, 1)}
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
	case l.fatal <- msg:
	default:
	}
}
