package docs

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/yuin/goldmark/ast"
)

// Command is one `make`, `stampede` or `stampede-bench` command quoted in a
// fenced shell block.
type Command struct {
	File string   // the page, relative to the root
	Line int      // the block line the command starts on
	Tool string   // "make", "stampede" or "stampede-bench"
	Args []string // the words after the tool, up to the end of its simple command
}

// Subcommand is the command path of a stampede command: its leading words
// that look like command names ("dlq list" of `stampede dlq list --limit
// 5`), nil when it starts with a flag or has no arguments.
func (c Command) Subcommand() []string {
	var out []string
	for _, a := range c.Args {
		if !commandWord.MatchString(a) {
			break
		}
		out = append(out, a)
	}
	return out
}

var commandWord = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// shellLanguages are the info strings of the fenced blocks read as shell.
var shellLanguages = map[string]bool{"sh": true, "shell": true, "bash": true, "zsh": true, "console": true}

// ShellCommands returns the make and stampede commands of the fenced shell
// blocks (sh, shell, bash, zsh; console: the lines after a "$ " prompt) of
// pages, in order. Words in quotes are one word ('stampede serve' is no
// command), comments and the file of a redirection are no words, and a
// command found after another word (`flock x make bench`, `$(bin/stampede
// token …)`) counts. A stampede command is the word stampede or a path
// ending in /stampede.
func ShellCommands(root string, pages []string) ([]Command, error) {
	var out []Command
	for _, rel := range pages {
		p, err := readPage(root, rel)
		if err != nil {
			return nil, err
		}
		_ = ast.Walk(p.doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			fb, ok := n.(*ast.FencedCodeBlock)
			if !entering || !ok {
				return ast.WalkContinue, nil
			}
			lang := string(fb.Language(p.src))
			if !shellLanguages[lang] {
				return ast.WalkSkipChildren, nil
			}
			var cmd strings.Builder
			start := 0
			for i := 0; i < fb.Lines().Len(); i++ {
				seg := fb.Lines().At(i)
				line := strings.TrimRight(string(seg.Value(p.src)), "\r\n")
				if cmd.Len() == 0 {
					start = p.line(seg.Start)
					if lang == "console" {
						var prompt bool
						if line, prompt = strings.CutPrefix(line, "$ "); !prompt {
							continue
						}
					}
				}
				if l, more := strings.CutSuffix(line, `\`); more {
					cmd.WriteString(l + " ")
					continue
				}
				cmd.WriteString(line)
				out = append(out, commandsIn(rel, start, cmd.String())...)
				cmd.Reset()
			}
			return ast.WalkSkipChildren, nil
		})
	}
	return out, nil
}

// commandsIn returns the make, stampede and stampede-bench commands of one
// shell line.
func commandsIn(file string, line int, s string) []Command {
	var out []Command
	for _, words := range simpleCommands(s) {
		for i, w := range words {
			tool := ""
			switch {
			case w == "make":
				tool = "make"
			case w == "stampede" || strings.HasSuffix(w, "/stampede"):
				tool = "stampede"
			case w == "stampede-bench" || strings.HasSuffix(w, "/stampede-bench"):
				tool = "stampede-bench"
			default:
				continue
			}
			out = append(out, Command{File: file, Line: line, Tool: tool, Args: words[i+1:]})
			break
		}
	}
	return out
}

// simpleCommands splits a shell line into its simple commands (at ; & | ( )
// ` and $( ), also inside "…"), each a list of words. Quotes group a word
// and are dropped; a backslash escapes the next character; a # at the start
// of a word begins a comment; the word after < or > is a file, not a word.
func simpleCommands(line string) [][]string {
	var (
		s      splitter
		quote  rune   // the quote the line is in, 0 outside quotes
		nested []rune // the quotes that $( ) substitutions interrupted
	)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == quote {
				quote = 0
			} else {
				s.add(r)
			}
		case r == '\\' && i+1 < len(rs):
			i++
			s.add(rs[i])
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			s.endCommand()
			i++
			quote, nested = 0, append(nested, quote)
		case quote == '"':
			if r == quote {
				quote = 0
			} else {
				s.add(r)
			}
		case r == '\'' || r == '"':
			quote, s.inWord = r, true
		case r == '#' && !s.inWord:
			s.endCommand()
			return s.out
		case r == ' ' || r == '\t':
			s.endWord()
		case r == '<' || r == '>':
			s.redirectNext()
		case r == '&' && s.redirect: // >&2
		case r == ')' && len(nested) > 0:
			s.endCommand() // back into the string (if any) the substitution was in
			quote, nested = nested[len(nested)-1], nested[:len(nested)-1]
			s.inWord = quote != 0
		case strings.ContainsRune(";&|()`", r):
			s.endCommand()
		default:
			s.add(r)
		}
	}
	s.endCommand()
	return s.out
}

// splitter collects the words and simple commands of simpleCommands.
type splitter struct {
	out      [][]string
	words    []string
	word     strings.Builder
	inWord   bool
	redirect bool // the word being read is the file of a redirection
}

func (s *splitter) add(r rune) {
	s.word.WriteRune(r)
	s.inWord = true
}

func (s *splitter) endWord() {
	if s.inWord && !s.redirect {
		s.words = append(s.words, s.word.String())
	}
	if s.inWord {
		s.redirect = false
	}
	s.word.Reset()
	s.inWord = false
}

func (s *splitter) endCommand() {
	s.endWord()
	if len(s.words) > 0 {
		s.out = append(s.out, s.words)
	}
	s.words = nil
}

// redirectNext ends the word before a < or >, dropping it if it is a file
// descriptor (2>&1), and makes the next word the redirection's file.
func (s *splitter) redirectNext() {
	if strings.Trim(s.word.String(), "0123456789") == "" {
		s.word.Reset()
		s.inWord = false
	}
	s.endWord()
	s.redirect = true
}

// makeFlagsWithArgument are make's options whose value is the next word.
var makeFlagsWithArgument = map[string]bool{"-C": true, "-f": true, "--file": true, "--makefile": true, "--directory": true, "-I": true, "-o": true, "-W": true}

// assignment is a VAR=value word (make's variables, a shell's environment).
var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// Targets returns the make targets a `make` command names: its words that
// are neither options nor VAR=value assignments. ok is false for a command
// that reads another makefile (-C, -f).
func (c Command) Targets() (targets []string, ok bool) {
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		switch {
		case a == "-C" || a == "-f" || strings.HasPrefix(a, "--directory") || strings.HasPrefix(a, "--file") || strings.HasPrefix(a, "--makefile"):
			return nil, false
		case makeFlagsWithArgument[a]:
			i++
		case strings.HasPrefix(a, "-") || assignment.MatchString(a):
		default:
			targets = append(targets, a)
		}
	}
	return targets, true
}

// makeRule matches a rule's line in a Makefile: its targets before a colon
// that does not start := or ::=.
var makeRule = regexp.MustCompile(`^([^\s:#=][^:#=]*?)\s*::?(?:[^=]|$)`)

// MakeTargets returns the targets the makefile at path defines (pattern
// rules and special targets such as .PHONY excluded).
func MakeTargets(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	set := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := makeRule.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		for _, t := range strings.Fields(m[1]) {
			if !strings.HasPrefix(t, ".") && !strings.Contains(t, "%") && !strings.Contains(t, "$") {
				set[t] = true
			}
		}
	}
	return set, sc.Err()
}

// CheckMakeTargets reports every `make <target>` of the fenced shell blocks
// of pages whose target root's Makefile does not define.
func CheckMakeTargets(root string, pages []string) []Problem {
	defined, err := MakeTargets(filepath.Join(root, "Makefile"))
	if err != nil {
		return []Problem{{File: "Makefile", Line: 1, Msg: err.Error()}}
	}
	cmds, err := ShellCommands(root, pages)
	if err != nil {
		return []Problem{{Msg: err.Error()}}
	}
	var out []Problem
	for _, c := range cmds {
		if c.Tool != "make" {
			continue
		}
		targets, ok := c.Targets()
		if !ok {
			continue
		}
		for _, t := range targets {
			if !defined[t] {
				out = append(out, Problem{c.File, c.Line, fmt.Sprintf("make %s: the Makefile has no target %q", t, t)})
			}
		}
	}
	return out
}

// CheckCommands runs `<subcommand…> --help` through run for every command of
// tool in the shell blocks of pages (each distinct one once) and returns
// those that fail, and how many it ran. run is the binary's own command
// table (app.Run for stampede); an error that is flag.ErrHelp is an answer.
// The usage texts the commands print to stderr go to /dev/null meanwhile:
// not for a test that runs in parallel with others.
func CheckCommands(root string, pages []string, tool string, run func(args []string) error) ([]Problem, int, error) {
	cmds, err := ShellCommands(root, pages)
	if err != nil {
		return nil, 0, err
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, 0, err
	}
	stderr := os.Stderr
	os.Stderr = devNull
	defer func() { os.Stderr = stderr; devNull.Close() }()
	var out []Problem
	answered := map[string]error{}
	for _, c := range cmds {
		sub := c.Subcommand()
		if c.Tool != tool || len(sub) == 0 {
			continue
		}
		key := strings.Join(sub, " ")
		err, seen := answered[key]
		if !seen {
			err = run(append(slices.Clone(sub), "--help"))
			if errors.Is(err, flag.ErrHelp) {
				err = nil
			}
			answered[key] = err
		}
		if err != nil {
			out = append(out, Problem{File: c.File, Line: c.Line, Msg: fmt.Sprintf("%s %s --help: %v", tool, key, err)})
		}
	}
	return out, len(answered), nil
}
