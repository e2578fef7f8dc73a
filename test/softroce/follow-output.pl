#!/usr/bin/perl
# follow-output.pl - used by vm-run.sh: follows the guest's output channel (a file that
# qemu's virtio console appends to) while the VM runs, and routes it:
#   - lines containing TOKEN are guest.sh's harness lines: to stderr, as "[vm-guest ...] ...";
#   - everything between the "begin" and "end" harness lines is the command's output: to
#     stdout, live, and to OUTLOG;
#   - anything else (before "begin", after "end": stragglers of background jobs): stderr.
# It stops once DONE exists (vm-run.sh creates it after qemu exited) and the file is drained.
#
# usage: follow-output.pl TOKEN RAWFILE DONE OUTLOG
#
# Why a file and not a pipe: qemu drops virtio-console output when its chardev cannot take
# it at once (a pipe that is full); a regular file always can.
# Only perl-base (essential on Debian): no modules beyond strict and warnings.
use strict;
use warnings;

sub nap { select(undef, undef, undef, 0.05) }   # 50 ms

my ($tok, $raw, $done, $outlog) = @ARGV;
open(my $out, ">", $outlog) or die "$outlog: $!\n";
for my $fh ($out, \*STDOUT, \*STDERR) { my $old = select($fh); $| = 1; select($old) }

my $in_cmd = 0;

sub route {
    my ($line) = @_;
    my $i = index($line, $tok);
    if ($i < 0) {
        if ($in_cmd) { print STDOUT $line; print $out $line } else { print STDERR $line }
        return;
    }
    # the command's last line when it had no newline: the harness line follows on it
    my $pre = substr($line, 0, $i);
    if ($in_cmd) { print STDOUT $pre; print $out $pre } elsif ($pre ne "") { print STDERR "$pre\n" }
    my $msg = substr($line, $i + length($tok));
    $in_cmd = 1 if $msg =~ /^ \S+ begin\r?$/;
    $in_cmd = 0 if $msg =~ /^ \S+ end:/;
    $msg =~ s/^ (\S+) /[vm-guest $1] /;
    print STDERR $msg;
}

# qemu creates the file when it starts; it may also fail before that
until (-e $raw) {
    exit 0 if -e $done;
    nap();
}
open(my $in, "<", $raw) or die "$raw: $!\n";
my $buf = "";
for (;;) {
    my $finished = -e $done;    # checked before reading: the read below then sees all
    while (sysread($in, $buf, 65536, length $buf)) {
        while ((my $nl = index($buf, "\n")) >= 0) {
            route(substr($buf, 0, $nl + 1, ""));
        }
    }
    if ($finished) {
        route($buf) if length $buf;
        last;
    }
    nap();
}
