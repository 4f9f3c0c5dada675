package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agent-reach/agentreach/streams"
)

// maxPayloadRead bounds how much of a payload file or stdin is read, and
// `up --max-payload`: 64 MiB, nats-server's default max_pending, above which
// it refuses a max_payload (NATS advises at most 8 MB).
const maxPayloadRead = 64 << 20

// payloadInput is where a payload of "-" is read from. Tests replace it.
var payloadInput = func() io.Reader { return os.Stdin }

// payload is a task's payload and where it came from.
type payload struct {
	data []byte
	from string // "stdin" or "file <path>"; "" for the argument or the default
}

// what names the payload in messages: "payload from file order.json".
func (p payload) what() string {
	if p.from == "" {
		return "payload"
	}
	return "payload from " + p.from
}

// readPayload returns the payload an argument gives: the JSON itself,
// "@<path>" for the contents of a file, or "-" for stdin. It does not check
// that the bytes are JSON. A payload over maxPayloadRead is a
// PAYLOAD_TOO_LARGE *streams.Error; any other error is a usage error.
func readPayload(arg string) (payload, error) {
	var (
		r    io.Reader
		from string
	)
	switch {
	case arg == "-":
		r, from = payloadInput(), "stdin"
	case strings.HasPrefix(arg, "@"):
		path := arg[1:]
		if path == "" {
			return payload{}, errors.New(`payload "@" names no file: want @<path>`)
		}
		f, err := os.Open(path)
		if err != nil {
			return payload{}, fmt.Errorf("payload file: %w", err) // *PathError names the file
		}
		defer f.Close()
		r, from = f, "file "+path
	default:
		return payload{data: []byte(arg)}, nil
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPayloadRead+1))
	if err != nil {
		return payload{}, fmt.Errorf("read payload from %s: %w", from, err)
	}
	if len(data) > maxPayloadRead {
		return payload{}, streams.NewError(streams.CodePayloadTooLarge, "payload from %s is over %d MiB, more than a NATS server takes unless configured far beyond its defaults",
			from, maxPayloadRead>>20)
	}
	return payload{data: data, from: from}, nil
}
