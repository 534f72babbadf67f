package testutil_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ankusa/ankusa/internal/testutil"
)

const childHelperEnv = "ANKUSA_TESTUTIL_CHILD_HELPER"

// TestDiesWithTest_Helper is the killed "test binary": it starts a long
// sleep with DiesWithTest, prints its pid and waits to be killed.
func TestDiesWithTest_Helper(t *testing.T) {
	if os.Getenv(childHelperEnv) == "" {
		t.Skip("a helper process of TestDiesWithTest")
	}
	cmd := exec.Command("sleep", "600")
	testutil.DiesWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("child", cmd.Process.Pid)
	select {}
}

// A child started with DiesWithTest dies when the test binary that
// started it is killed with SIGKILL (no cleanup runs).
func TestDiesWithTest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("DiesWithTest does nothing off Linux")
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestDiesWithTest_Helper$", "-test.v")
	helper.Env = append(os.Environ(), childHelperEnv+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	sc := bufio.NewScanner(out)
	for pid == 0 && sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "child" {
			pid, _ = strconv.Atoi(f[1])
		}
	}
	if pid == 0 {
		_ = helper.Process.Kill()
		t.Fatalf("the helper printed no child pid: %v", sc.Err())
	}
	if !alive(pid) {
		t.Fatalf("child %d is not running before the kill", pid)
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("child %d killed with the test binary", pid), func() bool { return !alive(pid) })
}

// alive reports whether pid runs (a zombie waiting for its new parent to
// reap it is dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
