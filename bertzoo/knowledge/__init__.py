"""Knowledge graphs for ERNIE (Tsinghua): reading and splitting graphs (`graphs`), TransE entity vectors
(`transe`), and linking the entities a text mentions (`linking`)."""
