// Command stampede is the flash-sale order system: one binary, every role
// (package app holds the commands and the configuration).
//
//	stampede serve [--roles gateway,writer,relay,consumer,sweeper,push] [--migrate]
//	stampede migrate | demo | token | reconcile | redis-takeover | dlq | version
//
// Settings come from STAMPEDE_* environment variables, overridden by flags;
// `stampede <command> -h` lists them. The benchmark is cmd/stampede-bench.
package main

import "github.com/stampede-sh/stampede/app"

func main() { app.Main() }
