package backup

import "os"

// NewFileStoreWithSync returns a file store whose fsyncs go through sync
// (dir is false for a file, true for a directory) before the real fsync; an
// error from sync fails the fsync.
func NewFileStoreWithSync(root string, sync func(path string, dir bool) error) (Store, error) {
	s, err := newFileStore(root)
	if err != nil {
		return nil, err
	}
	s.syncFile = func(f *os.File) error {
		if err := sync(f.Name(), false); err != nil {
			return err
		}
		return f.Sync()
	}
	s.syncDir = func(dir string) error {
		if err := sync(dir, true); err != nil {
			return err
		}
		return fsyncDir(dir)
	}
	return s, nil
}

// NextWait is the Scheduler's wait after a run.
var NextWait = nextWait
