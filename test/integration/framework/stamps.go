package framework

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// ShardStamps is the witness of contrib/controller-runtime/examples/sharded:
// the example stamps each ConfigMap it reconciles with "IDENTITY shard=S
// token=T", and ShardStamps, told of every version of every ConfigMap (from
// a watch), records each stamp written over a newer grant's (a token going
// down on an object) and each pair of replicas that stamped under one grant.
type ShardStamps struct {
	mu       sync.Mutex
	last     map[string]shardStamp
	stamps   int
	problems []string
}

type shardStamp struct {
	identity string
	token    int64
}

// See takes in the stamp of object (its annotation's value; anything else is
// ignored).
func (s *ShardStamps) See(object, stamp string) {
	fields := strings.Fields(stamp)
	if len(fields) != 3 || !strings.HasPrefix(fields[1], "shard=") {
		return
	}
	token, err := strconv.ParseInt(strings.TrimPrefix(fields[2], "token="), 10, 64)
	if err != nil {
		return
	}
	now := shardStamp{identity: fields[0], token: token}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]shardStamp{}
	}
	s.stamps++
	prev, seen := s.last[object]
	s.last[object] = now
	switch {
	case !seen || prev == now:
	case now.token < prev.token:
		s.problems = append(s.problems, fmt.Sprintf("%s stamped by %s with token %d after %s's token %d", object, now.identity, now.token, prev.identity, prev.token))
	case now.token == prev.token:
		s.problems = append(s.problems, fmt.Sprintf("%s stamped by %s and %s under one token %d", object, prev.identity, now.identity, now.token))
	}
}

// Result is the number of stamps seen and what was wrong with them.
func (s *ShardStamps) Result() (stamps int, problems []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stamps, append([]string(nil), s.problems...)
}
