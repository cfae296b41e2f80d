package postgres

import "strings"

// ClaimWithoutGroupRule makes every claim ignore message groups until
// restore is called: the control of the concurrent claim test, which shows
// that its checks catch two members of a group in flight.
func ClaimWithoutGroupRule() (restore func()) {
	saved := claimSQLs
	claimSQLs = claimSQLsOf(strings.Replace(candidates, groupRule, "", 1))
	return func() { claimSQLs = saved }
}

// SendWithoutGroupLock makes every send skip the group lock until restore
// is called: the control of TestMessagesGroupSendsCommitInOrder.
func SendWithoutGroupLock() (restore func()) {
	saved := sendSQL
	sendSQL = strings.Replace(sendSQL, "pg_advisory_xact_lock("+lockGroup+", g.h)", "g.h", 1)
	if sendSQL == saved {
		panic("the group lock is not where SendWithoutGroupLock looks")
	}
	return func() { sendSQL = saved }
}
