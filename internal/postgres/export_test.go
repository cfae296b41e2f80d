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
