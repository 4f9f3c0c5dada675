package failrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestARunLogsItsFirstFailureAtTheCallersLevel(t *testing.T) {
	var out bytes.Buffer
	log := zerolog.New(&out)
	var r Run
	for range 3 {
		r.Fail(&log, zerolog.ErrorLevel).Err(errors.New("down")).Msg("push failed")
	}
	if !r.Failing() {
		t.Error("Failing after three failures: false")
	}
	if n := r.Succeeded(); n != 3 {
		t.Errorf("Succeeded after three failures: %d, want 3", n)
	}
	if r.Failing() || r.Succeeded() != 0 {
		t.Error("a success did not end the run")
	}
	r.Fail(&log, zerolog.WarnLevel).Msg("push failed")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e struct {
			Level    string `json:"level"`
			Failures int    `json:"failures"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%d", e.Level, e.Failures))
	}
	if want := "error:1 debug:2 debug:3 warn:1"; strings.Join(got, " ") != want {
		t.Errorf("levels and counts %v, want %s", got, want)
	}
}
