package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The e2e child's stdout protocol (`ankusa bench client -n N`): one line
// when its first post goes out and one when its last is answered (the
// parent takes its CPU and backlog snapshots on them), then one line per
// 201, then "result <json e2eReport>".
const (
	linePosting = "posting"
	linePosted  = "posted"
	lineAck     = "ack " // ack <id> <unix ns its answer was read>
)

// e2eReport is the e2e child's result line: when posting began and ended
// (unix ns) and the posts without a 201.
type e2eReport struct {
	BeginNs int64 `json:"begin_ns"`
	EndNs   int64 `json:"end_ns"`
	Failures
}

// postCount is the e2e child's core: clients closed-loop goroutines post n
// hooks to url in all; atBegin and atEnd run before the first post and
// after the last answer.
func postCount(ctx context.Context, clients, n int, url string, body []byte, atBegin, atEnd func()) (acks []ack, f Failures, begin, end time.Time) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: clients,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	workers := make([]e2eWorker, clients)
	for i := range workers {
		workers[i].acks = make([]ack, 0, n/clients+1)
	}
	atBegin()
	begin = time.Now()
	postAll(ctx, workers, n, func(_ int, w *e2eWorker) { w.post(ctx, client, url, body) })
	end = time.Now()
	atEnd()
	acks = make([]ack, 0, n)
	for i := range workers {
		acks = append(acks, workers[i].acks...)
		f.add(&workers[i].Failures)
	}
	return acks, f, begin, end
}

// clientCountMain is `ankusa bench client -n N`: the e2e load generator.
func clientCountMain(ctx context.Context, url string, clients, n, bodyBytes int, stdout, stderr io.Writer) int {
	out := bufio.NewWriterSize(stdout, 64<<10)
	say := func(s string) { _, _ = out.WriteString(s + "\n"); _ = out.Flush() }
	acks, f, begin, end := postCount(ctx, clients, n, url, makeBody(bodyBytes), func() { say(linePosting) }, func() { say(linePosted) })
	if err := ctx.Err(); err != nil {
		fmt.Fprintf(stderr, "ankusa bench client: %v\n", err)
		return 1
	}
	for _, a := range acks {
		_, _ = out.WriteString(lineAck + a.id + " " + strconv.FormatInt(a.at.UnixNano(), 10) + "\n")
	}
	b, err := json.Marshal(e2eReport{BeginNs: begin.UnixNano(), EndNs: end.UnixNano(), Failures: f})
	if err != nil {
		fmt.Fprintf(stderr, "ankusa bench client: %v\n", err)
		return 1
	}
	say(lineResult + string(b))
	return 0
}

// e2eLoad is what the e2e child reported.
type e2eLoad struct {
	acks       []ack
	begin, end time.Time
	Failures
}

// postChild runs the e2e load generator as a child process (argv, then its
// flags) posting n hooks to url, and calls atBegin/atEnd when it says its
// first post went out and its last was answered (with the child's pid).
func postChild(ctx context.Context, argv []string, url string, clients, n, bodyBytes int, atBegin, atEnd func(pid int)) (e2eLoad, error) {
	args := append(slices.Clone(argv[1:]), "-url", url, "-c", strconv.Itoa(clients), "-b", strconv.Itoa(bodyBytes), "-n", strconv.Itoa(n))
	cmd, stdout, stderr, err := startChild(ctx, argv[0], args)
	if err != nil {
		return e2eLoad{}, err
	}
	var l e2eLoad
	var perr error
	bad := func(err error) {
		if perr == nil {
			perr = err
		}
	}
	began, ended, reported := false, false, false
	l.acks = make([]ack, 0, n)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == linePosting && !began:
			began = true
			atBegin(cmd.Process.Pid)
		case line == linePosted && began && !ended:
			ended = true
			atEnd(cmd.Process.Pid)
		case strings.HasPrefix(line, lineAck):
			id, ns, ok := strings.Cut(line[len(lineAck):], " ")
			at, err := strconv.ParseInt(ns, 10, 64)
			if !ok || err != nil || id == "" {
				bad(fmt.Errorf("load generator: bad ack line %q", line))
				continue
			}
			l.acks = append(l.acks, ack{id: id, at: time.Unix(0, at)})
		case strings.HasPrefix(line, lineResult):
			var r e2eReport
			if err := json.Unmarshal([]byte(line[len(lineResult):]), &r); err != nil {
				bad(fmt.Errorf("load generator: bad result line: %w", err))
			}
			l.Failures, l.begin, l.end = r.Failures, time.Unix(0, r.BeginNs), time.Unix(0, r.EndNs)
			reported = true
		default:
			bad(fmt.Errorf("load generator: unexpected line %q", line))
		}
	}
	werr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return e2eLoad{}, ctx.Err()
	case werr != nil:
		return e2eLoad{}, fmt.Errorf("load generator: %w: %s", werr, strings.TrimSpace(stderr.String()))
	case perr != nil:
		return e2eLoad{}, perr
	case !reported || !ended:
		return e2eLoad{}, errors.New("load generator: exited without its posts and a result")
	}
	return l, nil
}

// e2eClientArgv is the command that starts the e2e child: argv, or this
// executable with `bench client`.
func e2eClientArgv(argv []string) ([]string, error) {
	if len(argv) > 0 {
		return argv, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	return []string{exe, "bench", "client"}, nil
}
