/*
 * Text from files (a model's config values, an index's file names, a trace's process names) shown
 * on a terminal or quoted in an error message (text_escape.c): control characters and bytes that
 * are not UTF-8 are written as escapes, so the text is shown, never obeyed (ESC]0;title retitles
 * a terminal, ESC[2J clears it, CR and LF forge lines of output).
 *
 * The rule: a control character below 0x80 (C0 and DEL) becomes \xHH, a C1 character
 * (U+0080..U+009F, which some terminals obey too) \u00HH, a byte that does not start a valid UTF-8
 * character \xHH, a backslash \\ (so that an escape in the input cannot pass for one of ours);
 * everything else stands for itself.
 */
#ifndef DT_CORE_TEXT_ESCAPE_H
#define DT_CORE_TEXT_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* The next character of the NUL-terminated s (not at its end): sets *length to the bytes it
 * takes and returns its escape, written in buf, or NULL when the bytes stand for themselves. */
const char *dt__escape_next(const char *s, size_t *length, char buf[8]);

/* s escaped into out (size >= 4 bytes, always NUL-terminated), cut at a whole character with
 * "..." when it does not fit; returns out. For messages: "%s" of dt__escape_text(buf, ...). */
const char *dt__escape_text(char *out, size_t size, const char *s);

/* Writes s escaped to f. With width >= 0, writes at most width columns (an escape counts its
 * characters) and pads with spaces to width. */
void dt__escape_write(FILE *f, const char *s, int width);

/* Writes a library message (dt_last_error, a log message) to f: control characters and bytes
 * that are not UTF-8 escaped as dt__escape_write does, backslashes as they are. The library
 * escapes each file text it quotes already; escaping its backslashes again showed each escape
 * twice (a\\x1b for a\x1b). */
void dt__escape_write_message(FILE *f, const char *s);

/* Writes s to f as a JSON string, quotes included: quotes, backslashes and control characters
 * (C1 too) escaped, bytes that are not UTF-8 written as U+FFFD, so the output is valid JSON. */
void dt__escape_write_json(FILE *f, const char *s);

#endif /* DT_CORE_TEXT_ESCAPE_H */
