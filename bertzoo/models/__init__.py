"""The models, built from the parts in `bertzoo.nn`: the `Encoder` (BERT and its family, and with `causal` a
decoder-only GPT), the encoder-decoder (T5, MASS), the heads, incremental decoding (`generation`), and the
families whose backbone is not an `Encoder`: XLNet, Transformer-XL, ELMo and ERNIE-THU (an `Encoder` with
knowledge layers). A family with fields of its own keeps its config class beside its model."""
