package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// bar is a one-line progress bar, drawn only when its writer is a terminal: piped or
// redirected output gets the final summary and nothing else.
type bar struct {
	w     io.Writer
	on    bool
	label string
	drawn time.Time
	width int
}

func newBar(w io.Writer, label string) *bar {
	return &bar{w: w, on: isTerminal(w), label: label, width: 30}
}

// update redraws the bar, at most every 50ms: done of total (total < 0: not known),
// with a note after it.
func (b *bar) update(done, total int, note string) {
	if !b.on || time.Since(b.drawn) < 50*time.Millisecond {
		return
	}
	b.draw(done, total, note)
}

func (b *bar) draw(done, total int, note string) {
	b.drawn = time.Now()
	var line string
	if total > 0 {
		n := min(b.width*done/total, b.width)
		line = fmt.Sprintf("%s [%s%s] %d/%d", b.label, strings.Repeat("#", n), strings.Repeat(".", b.width-n), done, total)
	} else {
		line = fmt.Sprintf("%s %d", b.label, done)
	}
	if note != "" {
		line += "  " + note
	}
	fmt.Fprintf(b.w, "\r\x1b[K%s", line)
}

// finish draws the last state and ends the line.
func (b *bar) finish(done, total int, note string) {
	if !b.on {
		return
	}
	b.draw(done, total, note)
	fmt.Fprintln(b.w)
}
