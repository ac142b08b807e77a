package chaos

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"
)

// RequestID is the X-Request-Id the client sends with load request id; the frontends log
// it as request_id, which ties their migrations to the client's record.
func RequestID(id int) string { return "chaos-" + strconv.Itoa(id) }

// Migrations counts the migrations each request went through, by request id, from the
// frontends' JSON logs: their "request migrated" lines (docs/chaos.md, "The checker"). A
// request counts the number of its lines or the highest "migration" number among them,
// whichever is larger, so that neither a line lost nor a number wrongly kept hides a
// retry. Lines that are not JSON (a log cut by a kill) are skipped; the error is a read
// error only.
func Migrations(logs ...io.Reader) (map[string]int, error) {
	lines, highest := map[string]int{}, map[string]int{}
	for _, r := range logs {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var l struct {
				Message   string `json:"message"`
				RequestID string `json:"request_id"`
				Migration int    `json:"migration"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Message != "request migrated" || l.RequestID == "" {
				continue
			}
			lines[l.RequestID]++
			highest[l.RequestID] = max(highest[l.RequestID], l.Migration)
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	out := make(map[string]int, len(lines))
	for id, n := range lines {
		out[id] = max(n, highest[id])
	}
	return out, nil
}
