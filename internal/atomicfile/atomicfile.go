// Package atomicfile writes a file so that a reader sees the old content
// or the new, never a part: the credentials and certificates of auth and
// auth/devtls.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes b to path through a temporary file in the same directory
// and a rename, creating the directory (0700) when missing; the file gets
// mode.
func Write(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
