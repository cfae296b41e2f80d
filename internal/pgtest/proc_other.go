//go:build !linux

package pgtest

import (
	"bytes"
	"os/exec"
	"strconv"
	"syscall"
)

// sysProcAttr is how PostgreSQL's programs are started: in a process group
// of their own, as cred's user when cred is not nil.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// processes lists the machine's processes, as ps(1) gives them.
func processes() ([]process, error) {
	out, err := exec.Command("ps", "-A", "-o", "pid=,ppid=,pgid=,stat=").Output()
	if err != nil {
		return nil, err
	}
	var procs []process
	for _, line := range bytes.Split(out, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 4 {
			continue
		}
		pid, err1 := strconv.Atoi(string(f[0]))
		ppid, err2 := strconv.Atoi(string(f[1]))
		pgrp, err3 := strconv.Atoi(string(f[2]))
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		procs = append(procs, process{pid: pid, ppid: ppid, pgrp: pgrp, zombie: f[3][0] == 'Z'})
	}
	return procs, nil
}
