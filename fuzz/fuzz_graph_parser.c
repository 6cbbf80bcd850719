/*
 * libFuzzer target for the graph text parser. Any input must give DT_OK with a graph whose
 * printed text parses back to exactly the same text, or an error status with a message and
 * no graph; never a crash, a leak, a hang or undefined behaviour (built with ASan + UBSan).
 * Build and run with fuzz/run_graph_parser.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtensor/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1); /* the parser reads a NUL-terminated string */
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  dt_graph *g = (dt_graph *)text;
  dt_status st = dt_graph_parse(text, &g);
  free(text);
  if (st != DT_OK) {
    if (g != NULL || dt_last_error()[0] == '\0') abort(); /* contract: no graph, a message */
    return 0;
  }
  /* What parses prints, and what prints parses back to the same text. */
  char *printed = dt_graph_to_string(g);
  dt_graph *back = NULL;
  if (!printed || dt_graph_parse(printed, &back) != DT_OK) abort();
  char *again = dt_graph_to_string(back);
  if (!again || strcmp(printed, again) != 0) abort();
  dt_free(again);
  dt_free(printed);
  dt_graph_destroy(back);
  dt_graph_destroy(g);
  return 0;
}
