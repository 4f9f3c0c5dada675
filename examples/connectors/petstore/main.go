// Command petstore serves the example's REST API (see ../petstore.yaml)
// until interrupted:
//
//	go run ./examples/connectors/petstore --addr 127.0.0.1:8090
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/agent-reach/agentreach/examples/connectors"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	flag.Parse()
	log.Printf("pet store on http://%s", *addr)
	srv := &http.Server{Addr: *addr, Handler: connectors.PetStore(), ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
