//go:build unix

package stack

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/rs/zerolog"
)

// lockFile is the file in --data-dir that `up` locks while it runs.
const lockFile = "agentreach.lock"

// lockDataDir takes an exclusive lock on dir's lock file (flock, released
// by the kernel when the process ends, however it ends) and writes this
// process's id into it. When another process holds the lock it fails at
// once, naming dir and the holder's id. unlock releases the lock; the file
// stays, so that no process can lock a file another is about to replace.
func lockDataDir(dir string, _ zerolog.Logger) (unlock func() error, err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, dataDirInUse(dir, string(bytes.TrimSpace(holder)))
		}
		return nil, fmt.Errorf("--data-dir %s: lock %s: %w", dir, path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--data-dir %s: write %s: %w", dir, path, err)
	}
	return f.Close, nil // closing the file releases the lock
}

// dataDirInUse is the error of a data dir another process has locked; pid
// is what the holder wrote into the lock file.
func dataDirInUse(dir, pid string) error {
	holder := "another process"
	if pid != "" {
		holder = "process " + pid
	}
	return fmt.Errorf("--data-dir %s is in use by %s (another agentreach up?); stop it or choose another --data-dir", dir, holder)
}
