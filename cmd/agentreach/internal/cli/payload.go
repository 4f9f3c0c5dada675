package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agent-reach/agentreach/streams"
)

// MaxPayloadRead bounds how much of a payload file or stdin is read, and
// `up --max-payload`: 64 MiB, nats-server's default max_pending, above which
// it refuses a max_payload (NATS advises at most 8 MB).
const MaxPayloadRead = 64 << 20

// PayloadInput is where a payload of "-" is read from. Tests replace it.
var PayloadInput = func() io.Reader { return os.Stdin }

// Payload is a task's payload and where it came from.
type Payload struct {
	Data []byte
	from string // "stdin" or "file <path>"; "" for the argument or the default
}

// What names the payload in messages: "payload from file order.json".
func (p Payload) What() string {
	if p.from == "" {
		return "payload"
	}
	return "payload from " + p.from
}

// ReadPayload returns the payload an argument gives: the JSON itself,
// "@<path>" for the contents of a file, or "-" for stdin. It does not check
// that the bytes are JSON. A payload over maxPayloadRead is a
// PAYLOAD_TOO_LARGE *streams.Error; any other error is a usage error.
func ReadPayload(arg string) (Payload, error) {
	var (
		r    io.Reader
		from string
	)
	switch {
	case arg == "-":
		r, from = PayloadInput(), "stdin"
	case strings.HasPrefix(arg, "@"):
		path := arg[1:]
		if path == "" {
			return Payload{}, errors.New(`payload "@" names no file: want @<path>`)
		}
		f, err := os.Open(path)
		if err != nil {
			return Payload{}, fmt.Errorf("payload file: %w", err) // *PathError names the file
		}
		defer f.Close()
		r, from = f, "file "+path
	default:
		return Payload{Data: []byte(arg)}, nil
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxPayloadRead+1))
	if err != nil {
		return Payload{}, fmt.Errorf("read payload from %s: %w", from, err)
	}
	if len(data) > MaxPayloadRead {
		return Payload{}, streams.NewError(streams.CodePayloadTooLarge, "payload from %s is over %d MiB, more than a NATS server takes unless configured far beyond its defaults",
			from, MaxPayloadRead>>20)
	}
	return Payload{Data: data, from: from}, nil
}
