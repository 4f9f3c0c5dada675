//go:build ignore

// Command loadgen is the closed-loop caller of bench/throughput.py: N
// callers, each sending the next request on reach.task.<capability> as soon
// as its reply came, for a warm-up and then a measured period. It prints one
// JSON object: {"ok", "failed", "seconds", "rps", "codes"}. It is written in
// Go so that the caller is never what limits the agent being measured.
//
//	go run ./agentkit/python/bench/loadgen.go -server nats://127.0.0.1:4222 -capability echo
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	server := flag.String("server", nats.DefaultURL, "NATS URL")
	capability := flag.String("capability", "echo", "capability to call")
	callers := flag.Int("callers", 64, "concurrent callers")
	conns := flag.Int("conns", 4, "connections the callers share")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured warm-up")
	measure := flag.Duration("measure", 10*time.Second, "measured period")
	flag.Parse()

	ncs := make([]*nats.Conn, *conns)
	for i := range ncs {
		nc, err := nats.Connect(*server, nats.Name("loadgen"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer nc.Close()
		ncs[i] = nc
	}
	var (
		measuring  atomic.Bool
		ok, failed atomic.Int64
		mu         sync.Mutex
		codes      = map[string]int{}
	)
	ctx, cancel := context.WithTimeout(context.Background(), *warmup+*measure)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < *callers; i++ {
		wg.Add(1)
		go func(nc *nats.Conn) {
			defer wg.Done()
			for ctx.Err() == nil {
				m := nats.NewMsg("reach.task." + *capability)
				m.Header.Set("Content-Type", "application/json")
				m.Data = []byte(`{"text":"hello from loadgen"}`)
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				reply, err := nc.RequestMsgWithContext(rctx, m)
				rcancel()
				if !measuring.Load() || ctx.Err() != nil {
					continue
				}
				code := ""
				switch {
				case err != nil:
					code = err.Error()
				case reply.Header.Get("Reach-Status") != "FINISHED":
					code = reply.Header.Get("Reach-Error")
				}
				if code == "" {
					ok.Add(1)
					continue
				}
				failed.Add(1)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}(ncs[i%len(ncs)])
	}
	time.Sleep(*warmup)
	measuring.Store(true)
	start := time.Now()
	<-ctx.Done()
	secs := time.Since(start).Seconds()
	measuring.Store(false)
	wg.Wait()
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"ok": ok.Load(), "failed": failed.Load(), "seconds": secs, "rps": float64(ok.Load()) / secs, "codes": codes,
	})
}
