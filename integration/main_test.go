package integration

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RunChildIfAsked()
	os.Exit(m.Run())
}
