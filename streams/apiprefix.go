package streams

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// APIPrefix is the JetStream API prefix js sends its requests under:
// $JS.API., $JS.<domain>.API. in a JetStream domain (a leaf node's caller
// in the hub's), or the prefix it was given. A request built by hand — a
// batched direct get, say — goes where js's own requests go.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
