package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// runVersion is `stampede version`: the module version, the VCS commit the
// binary was built from and the Go version, from the build information the
// Go toolchain embeds (runtime/debug.ReadBuildInfo). A `go build` of a
// checkout says "(devel)" for the module version; a binary built without
// VCS stamping (-buildvcs=false, or outside a git checkout) says the commit
// is unknown.
func runVersion(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("stampede version", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: stampede version\n\nPrint the module version, the VCS commit and the Go version of this binary.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %s", errUsage, strings.Join(fs.Args(), " "))
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(info, ok))
	return nil
}

// versionText renders build information (ok false: none embedded) as
//
//	stampede <module version>
//	commit <revision> (<commit time>[, modified])
//	<go version> <GOOS>/<GOARCH>
func versionText(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "stampede (unknown version: no build information)\ncommit unknown\n"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	set := map[string]string{}
	for _, s := range info.Settings {
		set[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "stampede %s\n", version)
	if rev := set["vcs.revision"]; rev != "" {
		var notes []string
		if t := set["vcs.time"]; t != "" {
			notes = append(notes, t)
		}
		if set["vcs.modified"] == "true" {
			notes = append(notes, "modified")
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, "commit %s (%s)\n", rev, strings.Join(notes, ", "))
		} else {
			fmt.Fprintf(&b, "commit %s\n", rev)
		}
	} else {
		b.WriteString("commit unknown (built without VCS information: -buildvcs=false or outside a git checkout)\n")
	}
	goVersion := info.GoVersion
	if goos, goarch := set["GOOS"], set["GOARCH"]; goos != "" && goarch != "" {
		goVersion += " " + goos + "/" + goarch
	}
	if goVersion != "" {
		fmt.Fprintln(&b, goVersion)
	}
	return b.String()
}
