package registry

// NearestName returns the candidate closest to name, for a "did you mean"
// hint after name was not found (an unknown capability, a mistyped
// command), or "" when no candidate is close enough to be worth
// suggesting.
//
// Closeness is the edit distance counting an insertion, a deletion, a
// substitution or a swap of two neighbouring characters as one edit. A
// candidate is close when three times its distance is at most the length
// of the longer of the two names: one edit in a name of three or more
// characters ("ech" → "echo", "dql" → "dlq"), two in six or more, and so
// on. A candidate equal to name is never suggested. Of equally close
// candidates the one sorting first wins, so the answer does not depend on
// the order of candidates.
//
// The cost is O(len(name) × len(candidate)) for each candidate whose
// length alone does not rule it out; it is meant for error paths.
func NearestName(name string, candidates []string) string {
	target := []rune(name)
	best, bestDist := "", -1
	var rows [3][]int
	for _, c := range candidates {
		if c == name || c == "" {
			continue
		}
		cand := []rune(c)
		longer := max(len(target), len(cand))
		limit := longer / 3 // largest distance still close
		if limit == 0 || abs(len(target)-len(cand)) > limit {
			continue
		}
		d := editDistance(target, cand, &rows)
		if d > limit {
			continue
		}
		if bestDist < 0 || d < bestDist || (d == bestDist && c < best) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// the Levenshtein distance plus a swap of two neighbouring characters as
// one edit. rows is scratch space reused across calls.
func editDistance(a, b []rune, rows *[3][]int) int {
	for i := range rows {
		if cap(rows[i]) < len(b)+1 {
			rows[i] = make([]int, len(b)+1)
		}
		rows[i] = rows[i][:len(b)+1]
	}
	prev2, prev, cur := rows[0], rows[1], rows[2]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
