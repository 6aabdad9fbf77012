"""Model families beyond plain causal LMs (vision-language models): loading, processors and the inputs their
forward needs. Engine-independent: the strategies and the data layer build on it."""
