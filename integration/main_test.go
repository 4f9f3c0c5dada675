package integration

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RunChildAgentIfAsked()
	os.Exit(m.Run())
}
