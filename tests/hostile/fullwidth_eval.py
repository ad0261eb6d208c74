# expect: banned
# NFKC-normalised identifier: the parser turns this into eval.
ｅｖａｌ('1')
