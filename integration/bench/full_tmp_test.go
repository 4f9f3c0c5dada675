package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestTmpRun(t *testing.T) {
	sc := os.Getenv("BENCH_SCENARIOS")
	if sc == "" {
		t.Skip()
	}
	for _, s := range strings.Split(sc, ",") {
		rep, err := Run(context.Background(), s, Options{Quick: os.Getenv("BENCH_QUICK") != "", Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(rep.Table)
		for _, n := range rep.Notes {
			fmt.Println("NOTE:", n)
		}
		b, _ := json.MarshalIndent(rep.Figures, "", "  ")
		fmt.Println(string(b))
		os.WriteFile("/tmp/bench-"+s+".json", b, 0o644)
	}
}
