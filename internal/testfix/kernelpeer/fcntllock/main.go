// Command fcntllock takes a POSIX (fcntl) lock on a file and holds it:
// the lock taker that the kernel-peer tests run inside the guest (through
// the 9p share), built statically.
//
//	fcntllock [-wait] [-hold FILE] PATH TYPE START LEN
//	fcntllock -test PATH TYPE START LEN
//
// TYPE is r (F_RDLCK) or w (F_WRLCK); LEN 0 means to the end of the file.
// It opens PATH read-write and sets the lock with F_SETLK (F_SETLKW with
// -wait), printing "locked" or "denied" (EAGAIN, EACCES); with -hold it
// then keeps the lock until FILE exists (polled every 50 ms) and prints
// "released" as it exits. With -test it asks F_GETLK and prints "free"
// or "held TYPE START LEN PID" of the conflicting lock. Other errors are
// printed as "error ..." with exit status 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	wait := flag.Bool("wait", false, "block until the lock is granted (F_SETLKW)")
	hold := flag.String("hold", "", "hold the lock until this file exists")
	test := flag.Bool("test", false, "F_GETLK: print the conflicting lock")
	flag.Parse()
	if flag.NArg() != 4 {
		fail(errors.New("usage: fcntllock [-wait] [-hold FILE] [-test] PATH r|w START LEN"))
	}
	typ := int16(syscall.F_WRLCK)
	if flag.Arg(1) == "r" {
		typ = syscall.F_RDLCK
	}
	start, err1 := strconv.ParseInt(flag.Arg(2), 10, 64)
	n, err2 := strconv.ParseInt(flag.Arg(3), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		fail(err)
	}
	f, err := os.OpenFile(flag.Arg(0), os.O_RDWR, 0)
	if err != nil {
		fail(err)
	}
	lk := syscall.Flock_t{Type: typ, Whence: 0, Start: start, Len: n}
	if *test {
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
			fail(err)
		}
		if lk.Type == syscall.F_UNLCK {
			fmt.Println("free")
		} else {
			t := "w"
			if lk.Type == syscall.F_RDLCK {
				t = "r"
			}
			fmt.Printf("held %s %d %d %d\n", t, lk.Start, lk.Len, lk.Pid)
		}
		return
	}
	cmd := syscall.F_SETLK
	if *wait {
		cmd = syscall.F_SETLKW
	}
	if err := syscall.FcntlFlock(f.Fd(), cmd, &lk); err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
			fmt.Println("denied")
			return
		}
		fail(err)
	}
	fmt.Println("locked")
	if *hold == "" {
		return
	}
	for {
		if _, err := os.Stat(*hold); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.Close()
	fmt.Println("released")
}

func fail(err error) {
	fmt.Println("error", err)
	os.Exit(1)
}
