package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
)

// chunk is the size of each write(2) and read(2) through a mount, bytes.
const chunk = 1 << 20

// file is one file written through a mount: its name, size in bytes and
// SHA-256 of its contents.
type file struct {
	name string
	size int64
	sum  [sha256.Size]byte
}

func (f file) short() string { return hex.EncodeToString(f.sum[:4]) }

// plan splits size bytes into n files of nearly equal size (the first
// size%n files one byte longer).
func plan(size int64, n int) []file {
	fs := make([]file, n)
	for i := range fs {
		fs[i] = file{name: fmt.Sprintf("file-%03d.bin", i), size: size / int64(n)}
		if int64(i) < size%int64(n) {
			fs[i].size++
		}
	}
	return fs
}

// writeFiles writes each file of fs under dir with fresh random contents
// (ChaCha8 seeded from crypto/rand), 1 MiB per write, then fsync and
// close, recording each file's SHA-256 in fs. progress is called with the
// bytes of each write. It stops at the first error or when ctx ends.
func writeFiles(ctx context.Context, dir string, fs []file, progress func(int64)) error {
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return err
	}
	src := mrand.NewChaCha8(seed)
	buf := make([]byte, chunk)
	for i := range fs {
		if err := writeFile(ctx, filepath.Join(dir, fs[i].name), &fs[i], src, buf, progress); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(ctx context.Context, path string, f *file, src io.Reader, buf []byte, progress func(int64)) (err error) {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	h := sha256.New()
	for left := f.size; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(int64(len(buf)), left)]
		if _, err := io.ReadFull(src, b); err != nil {
			return err
		}
		h.Write(b)
		if _, err := out.Write(b); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		left -= int64(len(b))
		progress(int64(len(b)))
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	copy(f.sum[:], h.Sum(nil))
	return nil
}

// verifyFiles reads each file of fs under dir, 1 MiB per read, and
// compares its size and SHA-256 with what was written; a difference is an
// ErrVerify error naming the file. progress is called with the bytes of
// each read.
func verifyFiles(ctx context.Context, dir string, fs []file, progress func(int64)) error {
	buf := make([]byte, chunk)
	for _, f := range fs {
		if err := verifyFile(ctx, filepath.Join(dir, f.name), f, buf, progress); err != nil {
			return err
		}
	}
	return nil
}

func verifyFile(ctx context.Context, path string, f file, buf []byte, progress func(int64)) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	h := sha256.New()
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := in.Read(buf)
		if m > 0 {
			h.Write(buf[:m])
			n += int64(m)
			progress(int64(m))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	if n != f.size {
		return fmt.Errorf("%w: %s: read %d bytes, %d were written", ErrVerify, path, n, f.size)
	}
	if got := h.Sum(nil); !bytes.Equal(got, f.sum[:]) {
		return fmt.Errorf("%w: %s: SHA-256 %x, written %x", ErrVerify, path, got, f.sum)
	}
	return nil
}
