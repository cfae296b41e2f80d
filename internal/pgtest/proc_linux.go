package pgtest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr is how PostgreSQL's programs are started: in a process group
// of their own, as cred's user when cred is not nil, and killed if the
// tests' process dies first (a test binary stopped by its timeout leaves
// no server behind; the postmaster's children exit when it does).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// processes lists the machine's processes, read from /proc.
func processes() ([]process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and
		// parentheses, so the fields are read after its last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 3 || len(f[0]) == 0 {
			continue
		}
		ppid, err1 := strconv.Atoi(string(f[1]))
		pgrp, err2 := strconv.Atoi(string(f[2]))
		if err1 != nil || err2 != nil {
			continue
		}
		state := f[0][0]
		procs = append(procs, process{pid: pid, ppid: ppid, pgrp: pgrp, zombie: state == 'Z' || state == 'X'})
	}
	return procs, nil
}
